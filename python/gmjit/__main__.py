"""python -m gmjit ARGS: the gmtune CLI (gmtune beside the loaded libgmjit, else $GMJIT_GMTUNE,
else gmtune on PATH)."""

import os
import shutil
import sys

from . import _native


def _gmtune():
    explicit = os.environ.get("GMJIT_GMTUNE")
    if explicit:
        return explicit
    try:
        beside = _native.native_dir() / "gmtune"
        if beside.exists():
            return str(beside)
    except ImportError:
        pass
    return shutil.which("gmtune")


def main():
    path = _gmtune()
    if path is None:
        sys.stderr.write("gmjit: gmtune not found beside libgmjit, in $GMJIT_GMTUNE or on PATH\n")
        return 2
    # gmtune links libgmjit; in a pip install it sits beside it, which its build-time run path
    # does not name.
    library_dir = os.path.dirname(os.path.abspath(path))
    os.environ["LD_LIBRARY_PATH"] = os.pathsep.join(filter(None, [library_dir, os.environ.get("LD_LIBRARY_PATH")]))
    os.execv(path, [path, *sys.argv[1:]])


if __name__ == "__main__":
    sys.exit(main())
