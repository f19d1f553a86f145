"""``specchat serve``: the chat app in a web browser, through Textualize's textual-serve, for a projector or a
colleague's laptop on the LAN.

textual-serve runs one app process per browser tab (``python -m specchat.cli`` with the app's flags given here)
under Textual's web driver and relays its screen to xterm.js in the page, so what the browser shows is the app
itself: the same keys, colours, sidebar and history. It binds to 127.0.0.1 unless told otherwise; with
``--host 0.0.0.0`` anyone who can reach the port can chat with the model and read the saved history (the app has
no login), which the command says in one line before it starts.
"""

from __future__ import annotations

import argparse
import shlex
import sys

from specchat.errors import UserError

#: the host a server binds to unless told otherwise: this machine only
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8000
#: hosts that only this machine reaches
LOCAL_HOSTS = ("127.0.0.1", "localhost", "::1")


def add_arguments(p: argparse.ArgumentParser) -> None:
    """``--host``, ``--port`` and every option of the chat app, passed through to it."""
    from specchat.commands import tui

    p.description = (
        "The chat app in a web browser (textual-serve): prints the URL to open; every chat app option given here "
        "is passed to the app. Binds to 127.0.0.1 unless --host says otherwise."
    )
    p.add_argument("--host", default=DEFAULT_HOST,
                   help=f"address to listen on (default {DEFAULT_HOST}: this machine only; 0.0.0.0 exposes the app, "
                        "its model and its history to anyone who can reach the port)")
    p.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"port to listen on (default {DEFAULT_PORT})")
    tui.add_arguments(p)


def app_command(args: argparse.Namespace) -> str:
    """The command line textual-serve runs per browser tab: this interpreter, ``-m specchat.cli`` and the app's
    options as given (``--config``, ``--data-dir`` and the chat app's flags)."""
    from specchat.commands import tui

    argv = [sys.executable, "-m", "specchat.cli"]
    for flag, value in (("--config", getattr(args, "config", None)), ("--data-dir", getattr(args, "data_dir", None))):
        if value is not None:
            argv += [flag, str(value)]
    argv += tui.app_argv(args)
    return shlex.join(argv)


def run(args: argparse.Namespace) -> int:
    if not 0 < args.port < 65536:
        raise UserError(f"--port {args.port} is not a port number (1..65535)")
    try:
        from textual_serve.server import Server
    except ImportError:
        raise UserError("specchat serve needs textual-serve: pip install 'specchat[serve]'") from None
    url = f"http://{'[' + args.host + ']' if ':' in args.host else args.host}:{args.port}"
    if args.host not in LOCAL_HOSTS:
        print(f"specchat: serving on {args.host}: anyone who can reach port {args.port} can chat with the model and "
              "read the saved history (the app has no login)", file=sys.stderr)
    print(f"specchat serve: open {url} in a browser (Ctrl-C stops the server)", flush=True)
    server = Server(app_command(args), host=args.host, port=args.port, title="specchat")
    try:
        server.serve()
    except OSError as exc:
        raise UserError(f"cannot listen on {args.host}:{args.port}: {exc.strerror or exc}; choose another --port") from None
    return 0
