# The two commands of the README. Both set everything up first (ci/setup.sh is idempotent).
.PHONY: demo test setup

demo:
	bash ci/demo.sh

test:
	bash ci/test.sh

setup:
	bash ci/setup.sh
