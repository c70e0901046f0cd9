"""`pip install ./python`: the package, with libgmjit, gmtune and gmjit-worker copied into
gmjit/_native/ from an existing build ($GMJIT_BUILD_DIR, else ../build), or built with CMake when
there is none (Release, without tests and benchmarks)."""

import os
import pathlib
import shutil
import subprocess
import tempfile

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = pathlib.Path(__file__).resolve().parent
NATIVE = {"lib/libgmjit.so.0": "libgmjit.so.0", "tools/gmtune": "gmtune", "tuner/gmjit-worker": "gmjit-worker"}


def _complete(build_dir):
    return build_dir is not None and all((build_dir / path).exists() for path in NATIVE)


def _build_dir():
    explicit = os.environ.get("GMJIT_BUILD_DIR")
    if explicit:
        build_dir = pathlib.Path(explicit).resolve()
        if not _complete(build_dir):
            raise SystemExit(f"GMJIT_BUILD_DIR={explicit} lacks one of {', '.join(NATIVE)}")
        return build_dir
    existing = HERE.parent / "build"
    if _complete(existing):
        return existing
    if not (HERE.parent / "CMakeLists.txt").exists():
        raise SystemExit("no libgmjit build found and no libgmjit source above python/; set GMJIT_BUILD_DIR")
    build_dir = pathlib.Path(tempfile.mkdtemp(prefix="gmjit-build-"))
    print(f"gmjit: building libgmjit in {build_dir}")
    subprocess.check_call(["cmake", "-S", str(HERE.parent), "-B", str(build_dir), "-DCMAKE_BUILD_TYPE=Release",
                           "-DGMJIT_BUILD_TESTS=OFF", "-DGMJIT_BUILD_BENCH=OFF"])
    subprocess.check_call(["cmake", "--build", str(build_dir), "-j", str(os.cpu_count() or 2), "--target",
                           "gmjit", "gmtune", "gmjit-worker"])
    return build_dir


class BuildWithNative(build_py):
    def run(self):
        super().run()
        build_dir = _build_dir()
        target = pathlib.Path(self.build_lib) / "gmjit" / "_native"
        target.mkdir(parents=True, exist_ok=True)
        for source, name in NATIVE.items():
            shutil.copy2(build_dir / source, target / name)


setup(cmdclass={"build_py": BuildWithNative})
