"""bench_common.source_revision() names the code that ran: its "tree" is the git tree id of the
working tree (tracked and untracked files, less the ignored ones), equal to the tree of the commit
whose content this is, even when HEAD is older than the files; the checkout's own index is left
as it was."""
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))
from bench_common import source_revision  # noqa: E402


def git(repo, *args):
    return subprocess.run(["git", "-C", repo, "-c", "user.name=t", "-c", "user.email=t@t", *args],
                          capture_output=True, text=True, check=True).stdout.strip()


def write(repo, name, text):
    with open(os.path.join(repo, name), "w") as f:
        f.write(text)


def main():
    with tempfile.TemporaryDirectory() as repo:
        git(repo, "init", "-q")
        write(repo, ".gitignore", "build/\n")
        write(repo, "a.txt", "one\n")
        git(repo, "add", "-A")
        git(repo, "commit", "-q", "-m", "first")
        first = git(repo, "rev-parse", "HEAD")
        r = source_revision(repo)
        assert r["commit"] == first and r["modified"] is False, r
        assert r["tree"] == git(repo, "rev-parse", "HEAD^{tree}"), r

        # The files move on (a change, a new file, an ignored build output); HEAD stays behind.
        write(repo, "a.txt", "two\n")
        write(repo, "b.txt", "new\n")
        os.makedirs(os.path.join(repo, "build"))
        write(repo, "build/out.o", "ignored\n")
        index_before = git(repo, "ls-files", "--stage")
        r = source_revision(repo)
        assert r["commit"] == first and r["modified"] is True, r
        assert git(repo, "ls-files", "--stage") == index_before, "the checkout's index was changed"
        assert git(repo, "status", "--porcelain") != "", "the changes were staged or lost"

        # The tree id is that of the commit with exactly this content (the ignored file left out).
        git(repo, "add", "-A")
        git(repo, "commit", "-q", "-m", "second")
        assert r["tree"] == git(repo, "rev-parse", "HEAD^{tree}"), (r, git(repo, "ls-tree", "-r", "HEAD"))
        assert r["tree"] != git(repo, "rev-parse", first + "^{tree}")

        assert source_revision(os.path.join(repo, "build")) is not None  # inside the repository
    with tempfile.TemporaryDirectory() as plain:
        assert source_revision(plain) is None, "outside git there is no revision"
    print("source_revision: tree id of the working tree as it ran: ok")


if __name__ == "__main__":
    main()
