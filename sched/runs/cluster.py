"""Sweep points on an existing Dask cluster: ``sweep --executor dask://HOST:PORT`` (docs/handbook/dask.md §19).

Dask is never a dependency of the lab: ``dask.distributed`` is imported here, and only when a
sweep asks for a cluster. :func:`dask_executor` connects a client to the scheduler at
``HOST:PORT``, sends the lab's own code to every worker (a zip of the ``sched`` package, so a
worker needs Python and Dask, not a copy of the lab), and yields the client's
``concurrent.futures.Executor``, which :func:`sched.runs.sweep.run_sweep` uses like the local process
pool: the same points, the same rows, in the same order.

Errors are one readable line (:class:`sched.core.config.ConfigError`, exit code 2): an address that
is not ``dask://HOST:PORT``, Dask not installed, no scheduler answering, something that is not
Dask answering (its reply read as a huge message: ``MemoryError``), or no worker connected
within :data:`CONNECT_TIMEOUT_S` seconds. A worker keeps the code it was sent until it restarts:
restart the workers after changing the lab.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile

from ..core.config import ConfigError

__all__ = ["SCHEME", "CONNECT_TIMEOUT_S", "parse_dask_address", "dask_executor", "lab_code_zip"]

SCHEME = "dask://"
#: Seconds to wait for the scheduler to answer before giving up.
CONNECT_TIMEOUT_S = 10


def parse_dask_address(text: str) -> str:
    """The scheduler address ``tcp://HOST:PORT`` of ``dask://HOST:PORT`` (PORT from 1 to 65535).

    Raises :class:`ConfigError` (one line naming ``--executor``) for anything else.
    """
    usage = f"--executor: expected dask://HOST:PORT (the Dask scheduler's address), got {text!r}"
    if not text.startswith(SCHEME):
        raise ConfigError(usage)
    host, colon, port = text[len(SCHEME):].rpartition(":")
    if not colon or not host or "/" in host or not port.isdigit() or not 1 <= int(port) <= 65535:
        raise ConfigError(usage)
    return f"tcp://{host}:{int(port)}"


def lab_code_zip(directory: str) -> str:
    """Write ``infer_sched_lab_code.zip`` (the ``sched`` package's ``.py`` files) into
    ``directory``; returns its path."""
    import zipfile   # only a sweep on a cluster needs it

    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))   # sched/, with its sub-packages
    path = os.path.join(directory, "infer_sched_lab_code.zip")
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        for folder, subfolders, names in os.walk(package):
            subfolders[:] = sorted(d for d in subfolders if d != "__pycache__")
            inside = os.path.relpath(folder, os.path.dirname(package)).replace(os.sep, "/")
            for name in sorted(names):
                if name.endswith(".py"):
                    archive.write(os.path.join(folder, name), f"{inside}/{name}")
    return path


@contextlib.contextmanager
def dask_executor(url: str):
    """A ``concurrent.futures.Executor`` running on the Dask cluster at ``url`` (``dask://HOST:PORT``).

    Imports ``dask.distributed`` (only now), connects, uploads the lab's code to the workers and
    yields the executor; the client is closed on exit, the cluster is left running. Raises
    :class:`ConfigError` with one line when Dask is missing or the scheduler does not answer.
    """
    address = parse_dask_address(url)
    try:
        from dask.distributed import Client
    except ImportError:
        raise ConfigError(f"--executor {url}: needs the dask.distributed package, which is not installed "
                          "(it is optional: pip install dask distributed)") from None
    try:
        client = Client(address, timeout=f"{CONNECT_TIMEOUT_S}s")
    except (OSError, TimeoutError) as exc:
        raise ConfigError(f"--executor {url}: no Dask scheduler answered at {address} within "
                          f"{CONNECT_TIMEOUT_S} s ({type(exc).__name__}); start one with: dask scheduler "
                          f"--port PORT") from None
    except (MemoryError, ValueError, EOFError, TypeError, KeyError, AttributeError) as exc:
        # Something answered that does not speak Dask's protocol (a web server, a database): its
        # first bytes read as an absurd message length (MemoryError) or a message that is no dict.
        raise ConfigError(f"--executor {url}: something answered at {address} but it is not a Dask scheduler "
                          f"({type(exc).__name__} reading its reply); check the address and port") from None
    staging = None
    try:
        try:
            client.wait_for_workers(1, timeout=CONNECT_TIMEOUT_S)
        except (OSError, TimeoutError):
            raise ConfigError(f"--executor {url}: the scheduler at {address} has no worker after "
                              f"{CONNECT_TIMEOUT_S} s; start one with: dask worker {address}") from None
        staging = tempfile.mkdtemp(prefix="isl-dask-")
        client.upload_file(lab_code_zip(staging))
        yield client.get_executor()
    finally:
        if staging is not None:
            shutil.rmtree(staging, ignore_errors=True)
        client.close()
