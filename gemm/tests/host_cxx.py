"""The host C++ compiler the tests build their self-tests and the SIMT emulator with."""
import os
import shutil


def host_cxx():
    """$CXX, else the first of g++, c++, clang++-19, clang++ found on PATH; None when there is none."""
    return next((c for c in (os.environ.get("CXX"), "g++", "c++", "clang++-19", "clang++") if c and shutil.which(c)),
                None)
