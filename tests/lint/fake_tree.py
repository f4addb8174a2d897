"""Source trees made up for the lint scripts' own tests, under /tmp, removed by remove_all()."""
import os
import shutil
import tempfile

_made = []


def tree(files, prefix="corral-lint-"):
    """A directory holding `files` ({relative path: text}); returns its path."""
    root = tempfile.mkdtemp(prefix=prefix)
    _made.append(root)
    for path, text in files.items():
        full = os.path.join(root, path)
        os.makedirs(os.path.dirname(full), exist_ok=True)
        with open(full, "w", encoding="utf-8") as f:
            f.write(text)
    return root


def remove_all():
    while _made:
        shutil.rmtree(_made.pop(), ignore_errors=True)
