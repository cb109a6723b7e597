"""Writes a tiny pure-Python wheel (answercheck 1.0, with an `answer-check` command) into the
directory given: the verifier pip-installs it offline, as a Terminal-Bench 2 test.sh
pip-installs pytest from PyPI."""

import base64
import hashlib
import sys
import zipfile

NAME, VERSION = "answercheck", "1.0"
INFO = f"{NAME}-{VERSION}.dist-info"
FILES = {
    f"{NAME}/__init__.py": (
        "import sys\n\n\n"
        "def main():\n"
        "    with open(sys.argv[1]) as f:\n"
        "        sys.exit(0 if f.read().strip() == 'forty-two' else 1)\n"
    ),
    f"{INFO}/METADATA": f"Metadata-Version: 2.1\nName: {NAME}\nVersion: {VERSION}\n",
    f"{INFO}/WHEEL": (
        "Wheel-Version: 1.0\nGenerator: fixture\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    ),
    f"{INFO}/entry_points.txt": f"[console_scripts]\nanswer-check = {NAME}:main\n",
}


def digest(data: bytes) -> str:
    """A RECORD line's hash field."""
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def main(directory: str) -> None:
    record = "".join(f"{p},{digest(c.encode())},{len(c.encode())}\n" for p, c in FILES.items())
    with zipfile.ZipFile(f"{directory}/{NAME}-{VERSION}-py3-none-any.whl", "w") as wheel:
        for path, content in FILES.items():
            wheel.writestr(path, content)
        wheel.writestr(f"{INFO}/RECORD", record + f"{INFO}/RECORD,,\n")


if __name__ == "__main__":
    main(sys.argv[1])
