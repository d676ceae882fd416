"""The extraction child's confinement: what a parser exploit in it can reach, and what it cannot.

The document worker holds the key-encryption key and database credentials; the
parsers it runs on untrusted files (pdfminer, pdfium, Pillow, lxml, oletools,
tesseract, clamscan) are large and partly C. ``start`` runs such a child so
that taking it over gains little:

- **An empty environment.** The child gets ``PATH``, ``PYTHONPATH`` (the repo),
  ``LANG``, ``HOME``/``TMPDIR`` (its own directory) and nothing of the worker's:
  no ``PARLEY_*``, no passwords, no key paths.
- **A private directory**, made for this child, its working directory and
  ``TMPDIR``, in RAM (``/dev/shm`` where it is writable): what a parser writes
  there (OCR's page images) never reaches a disk. The caller removes it with
  the child (``Confined.close``); one left by a worker that was killed (its pid
  is in the name) is removed by the next ``start`` on the machine. The
  document itself never is a file: the parent sends it through the pipe.
- **Only its own files.** Landlock lets it read the interpreter, the
  system's programs and libraries, the repo's ``PACKAGES`` and what the
  caller names (clamscan's signatures), and write its own directory: no other
  file, whatever its mode, the KEK's included; it may not signal a process
  outside the sandbox (the worker). Kernels without Landlock skip this layer.
- **No privileges.** Every capability is dropped (bounding set included),
  with ``no_new_privs``: a worker started as root does not make its child root.
- **No network.** The child enters a new network namespace (inside a new user
  namespace; a root worker's child without one, directly) where no interface
  is up; where the kernel allows neither, the next layer is all there is.
  Then, always, a seccomp filter makes ``socket()`` and ``io_uring_setup()`` fail with
  ``EPERM``, so no socket of any family can be opened.
- **Bounded** by the caller: address space and CPU time (``RLIMIT_AS``,
  ``RLIMIT_CPU``) and wall-clock deadlines (``documents.pages``).

``confine`` is what the child runs first, before it imports any parser; it
returns what it got, which the parent logs. Entry: ``python -m
documents.sandbox READABLE_JSON module:function ARG...``; the function is
called with that report first.
"""

from __future__ import annotations

import ctypes
import errno
import importlib
import os
import json
import platform
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent

#: The repo's packages a child imports (documents.settings reads parley.settings); the rest of the repo, ``.data``
#: with the local KEK among it, stays closed.
PACKAGES = ("documents", "parley", "schemas")

#: Variables passed through from the worker when set: none of them secret, each needed by a tool the child runs.
_PASSED = ("TESSDATA_PREFIX",)

_CLONE_NEWUSER = 0x10000000
_CLONE_NEWNET = 0x40000000

# Landlock, from linux/landlock.h (the syscall numbers are the same on every architecture)
_SYS_LANDLOCK_CREATE_RULESET, _SYS_LANDLOCK_ADD_RULE, _SYS_LANDLOCK_RESTRICT_SELF = 444, 445, 446
_LANDLOCK_CREATE_RULESET_VERSION = 1
_LANDLOCK_RULE_PATH_BENEATH = 1
_FS_EXECUTE, _FS_WRITE_FILE, _FS_READ_FILE, _FS_READ_DIR = 1, 2, 4, 8
_FS_ABI1 = (1 << 13) - 1  # execute … make_sym: every right of ABI 1
_FS_REFER, _FS_TRUNCATE = 1 << 13, 1 << 14
_FS_FILE_RIGHTS = _FS_EXECUTE | _FS_WRITE_FILE | _FS_READ_FILE | _FS_TRUNCATE
_NET_BIND_TCP, _NET_CONNECT_TCP = 1, 2
_SCOPE_ABSTRACT_UNIX_SOCKET, _SCOPE_SIGNAL = 1, 2

# capabilities, from linux/capability.h and linux/prctl.h
_PR_CAPBSET_DROP = 24
_LINUX_CAPABILITY_VERSION_3 = 0x20080522

# seccomp, from linux/seccomp.h, linux/filter.h and linux/audit.h
_PR_SET_NO_NEW_PRIVS = 38
_PR_SET_SECCOMP = 22
_SECCOMP_MODE_FILTER = 2
_RET_ALLOW = 0x7FFF0000
_RET_ERRNO = 0x00050000
_LD_ABS_W, _JEQ_K, _JSET_K, _RET_K = 0x20, 0x15, 0x45, 0x06
_X32_BIT = 0x40000000
#: Per architecture: its AUDIT_ARCH and the syscalls that open a socket (socket, io_uring_setup).
_ARCHES = {"x86_64": (0xC000003E, (41, 425)), "aarch64": (0xC00000B7, (198, 425))}


class Confined:
    """A started child and its private directory; ``close`` kills its process group and removes the directory."""

    def __init__(self, process: subprocess.Popen, home: Path) -> None:
        self.process = process
        self.home = home

    def close(self) -> None:
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.process.wait(5)
        shutil.rmtree(self.home, ignore_errors=True)


def start(
    entry: str, args: list[str], *, readable: tuple[str, ...] = (), pass_fds: tuple[int, ...] = (), stdout: Any = None
) -> Confined:
    """Run ``entry`` (``module:function``) with ``args`` in a confined child (see the module's docstring).

    ``readable``: paths the child may read besides the interpreter, the system's programs and libraries and the
    repo's ``PACKAGES`` (clamscan's signatures, for one)."""
    scratch = _scratch()
    _sweep(scratch)
    home = Path(tempfile.mkdtemp(prefix=f"parley-child-{os.getpid()}-", dir=scratch))
    env = {
        "PATH": os.pathsep.join([str(Path(sys.executable).parent), "/usr/local/bin", "/usr/bin", "/bin"]),
        "PYTHONPATH": str(ROOT),
        "LANG": "C.UTF-8",
        "HOME": str(home),
        "TMPDIR": str(home),
        "PYTHONDONTWRITEBYTECODE": "1",  # the child may not write into the repo, and should not try
        **{name: os.environ[name] for name in _PASSED if name in os.environ},
    }
    paths = [*_readable(), *readable]
    try:
        process = subprocess.Popen(
            [sys.executable, "-m", "documents.sandbox", json.dumps(paths), entry, *args],
            pass_fds=pass_fds,
            env=env,
            cwd=home,
            stdin=subprocess.DEVNULL,
            stdout=stdout,
            start_new_session=True,  # its own process group: a kill takes its tesseract or clamscan too
        )
    except BaseException:
        shutil.rmtree(home, ignore_errors=True)
        raise
    return Confined(process, home)


def _scratch() -> Path:
    """Where children's directories are made: RAM where the host has it writable, else the temp dir."""
    shm = Path("/dev/shm")
    return shm if shm.is_dir() and os.access(shm, os.W_OK) else Path(tempfile.gettempdir())


def _sweep(scratch: Path) -> None:
    """Remove children's directories whose worker is gone (a SIGKILL skips ``Confined.close``)."""
    for leftover in scratch.glob("parley-child-*-*"):
        pid = leftover.name.split("-")[2]
        if pid.isdigit() and not Path(f"/proc/{pid}").exists():
            shutil.rmtree(leftover, ignore_errors=True)


def confine(readable: list[str]) -> dict[str, Any]:
    """Enter the sandbox (the child's first act); returns what it got: ``network_namespace``, ``landlock``."""
    libc = _libc()
    network = _unshare(_CLONE_NEWUSER | _CLONE_NEWNET) or (os.geteuid() == 0 and _unshare(_CLONE_NEWNET))
    if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS)")
    landlock = _restrict_files(readable, home=os.getcwd())
    _drop_capabilities()
    _deny_sockets()
    return {"network_namespace": network, "landlock": landlock}


def _readable() -> list[str]:
    """What any child must read: the interpreter and its packages, the repo's packages, programs and libraries."""
    system = ["/usr", "/lib", "/lib64", "/bin", "/sbin", "/etc/ld.so.cache", "/etc/localtime", "/etc/fonts"]
    python = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}
    return [p for p in [*system, *sorted(python), *(str(ROOT / name) for name in PACKAGES)] if os.path.exists(p)]


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def _unshare(flags: int) -> bool:
    """True if the namespaces were entered; False where the kernel or a container's policy refuses them."""
    if _libc().unshare(flags) == 0:
        return True
    if ctypes.get_errno() in (errno.EPERM, errno.EINVAL, errno.ENOSPC, errno.EUSERS, errno.ENOSYS):
        return False
    raise OSError(ctypes.get_errno(), "unshare")


def _deny_sockets() -> None:
    """A seccomp filter: socket() and io_uring_setup() fail with EPERM; so does any syscall of a foreign ABI."""
    machine = platform.machine()
    if machine not in _ARCHES:
        raise RuntimeError(f"no seccomp filter for {machine}: the extraction child will not run unconfined")
    arch, denied = _ARCHES[machine]
    deny = _RET_ERRNO | errno.EPERM
    program: list[tuple[int, int, int, int]] = [(_LD_ABS_W, 0, 0, 4)]  # seccomp_data.arch
    checks: list[tuple[int, int]] = []  # (opcode, k) of each test that jumps to "deny" when true
    if machine == "x86_64":
        checks.append((_JSET_K, _X32_BIT))  # the x32 ABI's numbers: no business here
    checks += [(_JEQ_K, number) for number in denied]
    # arch: equal → go on (jt 0); otherwise → deny (jump over the nr load, the checks and the allow).
    program.append((_JEQ_K, 0, len(checks) + 2, arch))
    program.append((_LD_ABS_W, 0, 0, 0))  # seccomp_data.nr
    for i, (opcode, k) in enumerate(checks):
        program.append((opcode, len(checks) - i, 0, k))  # true → jump over the remaining checks and the allow
    program += [(_RET_K, 0, 0, _RET_ALLOW), (_RET_K, 0, 0, deny)]
    code = b"".join(struct.pack("HBBI", *instruction) for instruction in program)
    buffer = ctypes.create_string_buffer(code)

    class _Program(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    prog = _Program(len(program), ctypes.addressof(buffer))
    if _libc().prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.byref(prog), 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_SECCOMP)")


def _restrict_files(readable: list[str], home: str) -> int:
    """Landlock: read only ``readable``, read and write only ``home``, no TCP (ABI 4), no signal to a process
    outside the sandbox (ABI 6); the ABI in force, 0 if unsupported."""
    libc = _libc()
    abi = libc.syscall(_SYS_LANDLOCK_CREATE_RULESET, None, 0, _LANDLOCK_CREATE_RULESET_VERSION)
    if abi < 1:
        return 0
    handled = _FS_ABI1 | (_FS_REFER if abi >= 2 else 0) | (_FS_TRUNCATE if abi >= 3 else 0)
    network = _NET_BIND_TCP | _NET_CONNECT_TCP if abi >= 4 else 0  # handled with no rule: no TCP bind or connect
    scoped = _SCOPE_ABSTRACT_UNIX_SOCKET | _SCOPE_SIGNAL  # no signal to the worker, no abstract socket outside
    if abi >= 6:
        attr = struct.pack("QQQ", handled, network, scoped)
    else:
        attr = struct.pack("QQ", handled, network) if abi >= 4 else struct.pack("Q", handled)
    ruleset = libc.syscall(_SYS_LANDLOCK_CREATE_RULESET, attr, len(attr), 0)
    if ruleset < 0:
        raise OSError(ctypes.get_errno(), "landlock_create_ruleset")
    try:
        read = _FS_EXECUTE | _FS_READ_FILE | _FS_READ_DIR
        rules = [(path, read) for path in readable] + [(home, handled), ("/dev/null", _FS_READ_FILE | _FS_WRITE_FILE)]
        for path, access in rules:
            fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            try:
                if not os.path.isdir(path):
                    access &= _FS_FILE_RIGHTS
                rule = struct.pack("=Qi", access & handled, fd)  # struct landlock_path_beneath_attr is packed
                if libc.syscall(_SYS_LANDLOCK_ADD_RULE, ruleset, _LANDLOCK_RULE_PATH_BENEATH, rule, 0) != 0:
                    raise OSError(ctypes.get_errno(), f"landlock_add_rule {path}")
            finally:
                os.close(fd)
        if libc.syscall(_SYS_LANDLOCK_RESTRICT_SELF, ruleset, 0) != 0:
            raise OSError(ctypes.get_errno(), "landlock_restrict_self")
    finally:
        os.close(ruleset)
    return abi


def _drop_capabilities() -> None:
    """No capabilities left, none to regain by exec: a child started by root is no longer root's equal."""
    libc = _libc()
    for capability in range(64):  # the bounding set, while CAP_SETPCAP is still held; EINVAL past the last one
        libc.prctl(_PR_CAPBSET_DROP, capability, 0, 0, 0)
    header = struct.pack("Ii", _LINUX_CAPABILITY_VERSION_3, 0)
    data = bytes(24)  # two {effective, permitted, inheritable} u32 triples, all zero
    if libc.capset(header, data) != 0:
        raise OSError(ctypes.get_errno(), "capset")


def _main(argv: list[str]) -> None:
    readable, entry, *args = argv
    confined = confine(json.loads(readable))
    module, _, function = entry.partition(":")
    getattr(importlib.import_module(module), function)(confined, *args)


if __name__ == "__main__":
    _main(sys.argv[1:])
