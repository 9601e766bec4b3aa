"""The TRex worker: TRex's own Python client library, run in a process of its own.

Why a separate process: importing TRex's client (``trex/__init__.py``) puts its bundled scapy 2.4.3
first on ``sys.path`` and drops already-loaded scapy modules, while perfkit needs scapy >= 2.5. So
this file imports only the standard library and TRex, and perfkit talks to it through pipes
(``perfkit.trex.client``). It runs with the TRex environment's Python
(``build/trex-venv``, made by ``make setup``, or ``PERFKIT_TREX_PYTHON``), as ``python -I worker.py``.

Protocol: one JSON object per line. Request ``{"id": n, "method": name, "params": {...}}``; answer
``{"id": n, "result": ...}`` or ``{"id": n, "error": {"kind": ..., "message": ...}}``. Errors are
always answers, never tracebacks on the user's screen: ``kind`` is ``config`` (with ``field``,
``value``, ``allowed``: bad input the user can fix), ``trex`` (TRex refused or failed: server
down, port busy ...), ``request`` (a bad request: a bug in perfkit) or ``internal``. Anything TRex
prints goes to stderr, which the client keeps in a log file: stdout carries only the protocol.

Library: ``$TREX_HOME/automation/trex_control_plane/interactive`` when ``TREX_HOME`` is set (a
lab's TRex installation, same version as its server), else the PyPI repackaging ``lbr_trex_client``.
"""
from __future__ import annotations

import base64
import contextlib
import ctypes
import io
import json
import os
import re
import signal
import sys
import traceback
from typing import Any, Callable

DISCONNECT_SECONDS = 10
"""How long the worker's exit may spend disconnecting from TRex (stop traffic, release the ports)."""
PROTOCOL = 1
"""Bumped when requests or answers change shape; ``hello`` reports it and the client checks it."""


class RequestError(Exception):
    """A request perfkit should not have sent (unknown method, missing parameter)."""


class ConfigProblem(Exception):
    """Bad user input: answered as ``kind: config`` with the field, the value and what is allowed."""

    def __init__(self, field: str, value: Any, allowed: str):
        super().__init__(f"{field}: {value!r} is not allowed; allowed: {allowed}")
        self.field, self.value, self.allowed = field, value, allowed


# -- the library -----------------------------------------------------------------------------------
def interactive_dir(trex_home: str) -> str:
    """Where a TRex installation keeps its Python client (the package ``trex``)."""
    return os.path.join(trex_home, "automation", "trex_control_plane", "interactive")


def import_trex() -> dict[str, Any]:
    """TRex's STL API as a name -> object dict, and where it came from (``source``)."""
    home = os.environ.get("TREX_HOME")
    if home:
        path = interactive_dir(home)
        if not os.path.isdir(os.path.join(path, "trex")):
            raise ConfigProblem("TREX_HOME", home, "a TRex installation: a directory with "
                                "automation/trex_control_plane/interactive/trex (e.g. /opt/trex/v3.04)")
        sys.path.insert(0, path)
        source = path
    else:
        import lbr_trex_client  # noqa: F401  (puts TRex's 'interactive' on sys.path)

        source = os.path.dirname(lbr_trex_client.__file__)
    import trex.stl.api as api
    from trex.utils import parsing_opts

    names = dict(vars(api))
    names["parsing_opts"] = parsing_opts
    names["source"] = source
    return names


# -- helpers ---------------------------------------------------------------------------------------
def one_line(text: str) -> str:
    """TRex's messages span lines (and carry ANSI colours): the user gets one."""
    text = re.sub(r"\x1b\[[0-9;]*m", "", str(text))
    return " ".join(text.split())


def jsonable(value: Any) -> Any:
    """TRex's answers as JSON: dict keys become strings (the client turns digit keys back into
    ints), bytes become base64, anything else unknown its ``str``."""
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set)):
        return [jsonable(v) for v in value]
    if isinstance(value, (bytes, bytearray)):
        return base64.b64encode(bytes(value)).decode()
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(value)


def last_error_line(summary: str) -> str:
    """The ``ExcType: message`` line of the traceback text that ``STLProfile.load_py`` raises."""
    lines = [ln for ln in str(summary).splitlines() if ln.strip()]
    return one_line(lines[-1]) if lines else "unknown error"


def profile_location(summary: str, path: str) -> str:
    """``file:line`` of the last frame inside the profile itself, or '' when none is."""
    name = os.path.basename(path)
    found = re.findall(r'File "([^"]+)", line (\d+)', str(summary))
    inside = [(f, n) for f, n in found if os.path.basename(f) == name]
    return f" (at {name}:{inside[-1][1]})" if inside else ""


# -- streams ---------------------------------------------------------------------------------------
VM_CLASSES = ("STLVmFlowVar", "STLVmFlowVarRepeatableRandom", "STLVmWrFlowVar", "STLVmWrMaskFlowVar",
              "STLVmFixIpv4", "STLVmFixChecksumHw", "STLVmTupleGen", "STLVmTrimPktSize")
L4_TYPES = {"udp": "L4_TYPE_UDP", "tcp": "L4_TYPE_TCP", "ip": "L4_TYPE_IP"}


class Streams:
    """perfkit's plain stream specs -> TRex ``STLStream`` objects (TRex's own checks apply)."""

    def __init__(self, trex: dict[str, Any]):
        self.t = trex

    def instruction(self, spec: dict[str, Any]) -> Any:
        kind = spec.get("type")
        if kind not in VM_CLASSES:
            raise RequestError(f"vm instruction type {kind!r}; allowed: {', '.join(VM_CLASSES)}")
        kwargs = dict(spec.get("args", {}))
        if kind == "STLVmFixChecksumHw" and isinstance(kwargs.get("l4_type"), str):
            # TRex's constants, not their numbers: they are TRex's to change
            kwargs["l4_type"] = getattr(self.t["CTRexVmInsFixHwCs"], L4_TYPES[kwargs["l4_type"]])
        return self.t[kind](**kwargs)

    def mode(self, spec: dict[str, Any]) -> Any:
        kinds = {"continuous": "STLTXCont", "single_burst": "STLTXSingleBurst", "multi_burst": "STLTXMultiBurst"}
        kind = spec.get("type")
        if kind not in kinds:
            raise RequestError(f"mode type {kind!r}; allowed: {', '.join(kinds)}")
        return self.t[kinds[kind]](**{k: v for k, v in spec.items() if k != "type"})

    def flow_stats(self, spec: dict[str, Any] | None) -> Any:
        if not spec:
            return None
        kinds = {"latency": "STLFlowLatencyStats", "stats": "STLFlowStats"}
        if spec.get("type") not in kinds:
            raise RequestError(f"flow_stats type {spec.get('type')!r}; allowed: {', '.join(kinds)}")
        return self.t[kinds[spec["type"]]](pg_id=spec["pg_id"])

    def stream(self, spec: dict[str, Any]) -> Any:
        vm = [self.instruction(i) for i in spec.get("vm", [])]
        builder = self.t["STLPktBuilder"](pkt_buffer=base64.b64decode(spec["frame"]),
                                          vm=self.t["STLScVmRaw"](vm) if vm else None)
        dst_modes = {"pkt": "STLStreamDstMAC_PKT", "cfg": "STLStreamDstMAC_CFG_FILE"}
        kwargs = {k: spec[k] for k in ("name", "random_seed", "mac_src_override_by_pkt", "enabled", "self_start",
                                       "isg", "next", "action_count") if k in spec}
        if "mac_dst_override_mode" in spec:
            kwargs["mac_dst_override_mode"] = self.t[dst_modes[spec["mac_dst_override_mode"]]]
        return self.t["STLStream"](packet=builder, mode=self.mode(spec["mode"]),
                                   flow_stats=self.flow_stats(spec.get("flow_stats")), **kwargs)

    def streams(self, specs: list[dict[str, Any]]) -> list[Any]:
        return [self.stream(s) for s in specs]


# -- the worker ------------------------------------------------------------------------------------
SESSION_CALLS = {"reset", "set_l2_mode", "set_l3_mode", "set_service_mode", "clear_stats", "start", "stop",
                 "wait_on_traffic", "get_stats", "start_capture", "remove_all_streams", "acquire", "release",
                 "get_port_attr", "get_server_version", "get_server_system_info"}
"""``STLClient`` methods a perfkit request may call by name (with JSON arguments)."""


class Worker:
    """Answers requests; holds at most one ``STLClient`` (one TRex server session)."""

    def __init__(self) -> None:
        self.trex: dict[str, Any] | None = None
        self.client: Any = None

    def lib(self) -> dict[str, Any]:
        if self.trex is None:
            self.trex = import_trex()
        return self.trex

    # -- methods ---------------------------------------------------------------------------------
    def hello(self) -> dict[str, Any]:
        t = self.lib()
        return {"wire_version": PROTOCOL, "python": sys.version.split()[0], "source": t["source"],
                "pid": os.getpid()}

    def load_profile(self, path: str, tunables: list[str] | dict[str, Any] | None = None, port_id: int = 0,
                     port_parity: int = 0) -> list[dict[str, Any]]:
        """``STLProfile.load_py`` as TRex's console calls it (``start -f PATH --port P -t ...``), and the
        streams' ``to_json()``: what the server would receive."""
        t = self.lib()
        if not os.path.isfile(path):
            raise ConfigProblem("trex profile", path, "an existing TRex STL profile file (.py)")
        kwargs = self.console_tunables(tunables)
        stderr = io.StringIO()
        try:
            with contextlib.redirect_stderr(stderr):
                profile = t["STLProfile"].load_py(path, direction=port_parity, port_id=port_id, **kwargs)
        except t["TRexError"] as err:
            raise self.profile_error(path, str(err), tunables) from None
        if profile is None:  # the profile's argparse exited: a bad tunable (TRex returns None then)
            raise ConfigProblem("tunables", tunables, f"what {os.path.basename(path)} accepts: "
                                f"{one_line(stderr.getvalue()) or 'see -t --help'}")
        return jsonable(profile.to_json())

    def console_tunables(self, tunables: list[str] | dict[str, Any] | None) -> dict[str, Any]:
        """TRex 3.04's console passes ``-t a=1,b=2`` as keywords a=1, b=2 *and* as
        ``tunables=['--a', '1', '--b', '2']``; ``-t --a 1`` only as ``tunables``. A dict is the former."""
        po = self.lib()["parsing_opts"]
        if not tunables:
            return {"tunables": []}
        if isinstance(tunables, dict):
            words = ",".join(f"{k}={v}" for k, v in tunables.items())
        elif "=" in tunables[0] and not tunables[0].startswith("-"):
            words = ",".join(tunables)
        else:
            return {"tunables": [str(w) for w in tunables]}
        try:
            decoded = po.decode_tunables(words)
        except Exception as err:  # argparse.ArgumentTypeError: "bad syntax for tunables: x"
            raise ConfigProblem("tunables", tunables, f"key=value pairs or --key value words ({one_line(err)})")
        return {**decoded, "tunables": po.convert_old_tunables_to_new_tunables(words)}

    def profile_error(self, path: str, summary: str, tunables: Any) -> Exception:
        line = last_error_line(summary)
        if line.startswith("TypeError:") and "keyword argument" in line:
            return ConfigProblem("tunables", tunables, f"what {os.path.basename(path)}'s get_streams() takes "
                                 f"({line})")
        return RuntimeError(f"TRex profile {path}: {line}{profile_location(summary, path)}")

    def build_streams(self, streams: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """perfkit's stream specs as TRex's ``STLStream`` JSON (nothing is sent anywhere)."""
        built = Streams(self.lib()).streams(streams)
        return jsonable(self.lib()["STLProfile"](built).to_json())

    def connect(self, server: str, sync_port: int = 4501, async_port: int = 4500,
                sync_timeout: float | None = None, async_timeout: float | None = None) -> dict[str, Any]:
        """One ``STLClient`` session: connect and acquire nothing yet (``reset`` acquires ports)."""
        if self.client is not None:
            raise RequestError("already connected: disconnect first")
        client = self.lib()["STLClient"](server=server, sync_port=sync_port, async_port=async_port,
                                         verbose_level="error", sync_timeout=sync_timeout, async_timeout=async_timeout)
        try:
            client.connect()
        except BaseException:
            with contextlib.suppress(Exception):
                client.disconnect()
            raise
        self.client = client
        return {"server": server, "sync_port": sync_port, "async_port": async_port}

    def call(self, name: str, kwargs: dict[str, Any] | None = None) -> Any:
        """One ``STLClient`` method from ``SESSION_CALLS``, with JSON arguments."""
        if name not in SESSION_CALLS:
            raise RequestError(f"STLClient method {name!r}; allowed: {', '.join(sorted(SESSION_CALLS))}")
        return jsonable(getattr(self.session(), name)(**(kwargs or {})))

    def add_streams(self, streams: list[dict[str, Any]], ports: list[int]) -> list[int]:
        return jsonable(self.session().add_streams(Streams(self.lib()).streams(streams), ports=ports))

    def stop_capture(self, capture_id: int) -> list[dict[str, Any]]:
        """The captured packets: ``binary`` base64, ``ts``, ``port``, ``index``."""
        out: list[dict[str, Any]] = []
        self.session().stop_capture(capture_id, output=out)
        return jsonable(out)

    def disconnect(self) -> None:
        """Release the ports and disconnect. The client is kept if SIGTERM cuts this short, so that
        serve()'s exit disconnects again; an error ends the session all the same."""
        client = self.client
        if client is None:
            return
        try:
            client.disconnect()
        except Exception:
            self.client = None
            raise
        self.client = None

    def session(self) -> Any:
        if self.client is None:
            raise RequestError("not connected: call connect first")
        return self.client

    # -- dispatch ---------------------------------------------------------------------------------
    METHODS = ("hello", "load_profile", "build_streams", "connect", "call", "add_streams", "stop_capture",
               "disconnect")

    def answer(self, request: dict[str, Any]) -> dict[str, Any]:
        rid = request.get("id")
        try:
            method = request.get("method")
            if method not in self.METHODS:
                raise RequestError(f"method {method!r}; allowed: {', '.join(self.METHODS)}")
            fn: Callable[..., Any] = getattr(self, method)
            return {"id": rid, "result": fn(**request.get("params", {}))}
        except ConfigProblem as err:
            return {"id": rid, "error": {"kind": "config", "message": str(err), "field": err.field,
                                         "value": jsonable(err.value), "allowed": err.allowed}}
        except Exception as err:
            return {"id": rid, "error": self.describe(err)}

    def describe(self, err: Exception) -> dict[str, Any]:
        trex_error = self.trex.get("TRexError") if self.trex else None
        traceback.print_exc(file=sys.stderr)  # the log file keeps the whole story
        if trex_error is not None and isinstance(err, trex_error):
            return {"kind": "trex", "message": one_line(err)}
        if isinstance(err, (RequestError, TypeError)):
            return {"kind": "request", "message": one_line(f"{type(err).__name__}: {err}")}
        if isinstance(err, RuntimeError):
            return {"kind": "error", "message": one_line(err)}
        return {"kind": "internal", "message": one_line(f"{type(err).__name__}: {err}")}


def die_with_parent() -> None:
    """SIGTERM when perfkit dies, even by SIGKILL: a worker never outlives it holding TRex ports.
    (Without it, EOF on stdin ends the worker once it is idle.)"""
    if os.environ.get("PERFKIT_TREX_DIE_WITH_PARENT") != "1":
        return
    with contextlib.suppress(Exception):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    if os.getppid() == 1:
        sys.exit(0)


_leaving = False
"""Set once the worker has stopped serving. perfkit's death brings both EOF on stdin and SIGTERM
(PR_SET_PDEATHSIG), in either order; a SIGTERM that lands after EOF must not abort the disconnect
and leave the ports held. The disconnect's alarm bounds the exit instead."""


def on_sigterm(*_: Any) -> None:
    """Leave by SystemExit, so serve()'s finally disconnects; ignored once it is disconnecting."""
    if not _leaving:
        sys.exit(143)


def serve(inp: io.TextIOBase, out: io.TextIOBase) -> None:
    global _leaving
    worker = Worker()
    try:
        for line in inp:
            if not line.strip():
                continue
            try:
                request = json.loads(line)
            except ValueError as err:
                reply = {"id": None, "error": {"kind": "request", "message": f"not JSON: {err}"}}
            else:
                reply = worker.answer(request)
            out.write(json.dumps(reply) + "\n")
            out.flush()
    finally:
        _leaving = True  # first, before any point where Python runs a pending signal handler
        bounded(worker.disconnect, DISCONNECT_SECONDS)  # releases the ports TRex gave this session


def bounded(fn: Callable[[], Any], seconds: int) -> None:
    """Run ``fn`` for at most ``seconds``: TRex's ``disconnect`` stops traffic first and can wait forever
    for a server that is gone (``_remove_rx_filters`` polls a profile state only the server changes),
    and a worker must end when perfkit has gone."""
    def expire(*_: Any) -> None:
        raise TimeoutError(f"gave up after {seconds} s")

    old = signal.signal(signal.SIGALRM, expire)
    signal.alarm(seconds)
    try:
        fn()
    except BaseException as err:  # we are leaving anyway
        print(f"perfkit TRex worker: disconnect: {type(err).__name__}: {err}", file=sys.stderr)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def main() -> None:
    die_with_parent()
    signal.signal(signal.SIGTERM, on_sigterm)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is perfkit's to handle; it closes us
    # The protocol gets its own copy of stdout; fd 1 then points at stderr, so whatever TRex or
    # scapy prints (even from C) cannot corrupt an answer.
    proto = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    serve(sys.stdin, proto)


if __name__ == "__main__":
    main()
