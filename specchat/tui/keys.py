"""Key bindings: ids, defaults, and how the config's ``keymap`` maps onto them.

Every binding has an id; ``settings.keymap`` may use either orientation (both are accepted, because
both are natural to write):

- ``binding id -> keys`` (Textual's own keymap format): ``k_up = "ctrl+k"`` or ``k_up = "f4,ctrl+k"``;
- ``key -> binding id``: ``"ctrl+k" = "k_up"`` (several keys may name the same id).

Either way the given keys *replace* the default keys of that binding. Entries naming no known id are
reported once in the app (with the list of ids) and ignored. A key given to a binding that another
binding also has (by default or by the keymap) is reported too: Textual would silently take it from the
other binding (``BindingsMap.apply_keymap``), or, between the app and the prompt, the app's priority
binding would shadow the prompt's.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from textual.binding import Binding
from textual.widgets import TextArea


@dataclass(frozen=True)
class KeySpec:
    id: str
    keys: str
    action: str
    description: str
    help: str
    show: bool = True
    priority: bool = True  # checked before the focused widget (TextArea binds f6/f7 itself)


#: Every function has a key that is not an F-key too (GNOME Terminal takes F1, macOS needs fn for F-keys):
#: ctrl+g help (as in nano), ctrl+b sidebar (as in VS Code), ctrl+up/down K, ctrl+t speculation, and alt+letter
#: for the display toggles (terminals send alt+x as ESC x; macOS Terminal needs "Use Option as Meta key").
#: ctrl letters the prompt (a TextArea) uses for editing (a e w d x c v u k z y) are left to it.
APP_KEYS: tuple[KeySpec, ...] = (
    KeySpec("help", "ctrl+g,f1", "help", "Help & glossary",
            "glossary (acceptance, \u03b1, K, costs, colours), then keys and binding ids"),
    KeySpec("toggle_sidebar", "ctrl+b,f2", "toggle_sidebar", "Sidebar",
            "show / hide the statistics sidebar (hidden by itself when the terminal is narrow)"),
    KeySpec("k_down", "f3,ctrl+down", "k_down", "K\u2212", "draft length K down (applies at the next step)", show=False),
    KeySpec("k_up", "f4,ctrl+up", "k_up", "K+", "draft length K up (applies at the next step)", show=False),
    KeySpec("toggle_speculation", "f5,ctrl+t", "toggle_speculation", "Spec", "speculation on / off (next step)",
            show=False),
    KeySpec("toggle_auto_k", "f6,alt+k", "toggle_auto_k", "Auto-K", "let the cost model choose K", show=False),
    KeySpec("toggle_ghosts", "f7,alt+g", "toggle_ghosts", "Ghosts", "show / hide rejected draft tokens", show=False),
    KeySpec("toggle_markdown", "f8,alt+m", "toggle_markdown", "Markdown", "finished replies as Markdown / tokens",
            show=False),
    KeySpec("copy_reply", "f9,alt+c", "copy_reply", "Copy the last reply",
            "copy the last reply to the clipboard (never the ghost text; through the terminal: OSC 52)", show=False),
    # alt+b: b for block (no other binding, nor the prompt, has it)
    KeySpec("copy_code", "alt+b", "copy_code", "Copy a code block",
            "copy the last reply's last code block; press again for the block before it", show=False),
    # alt+e: e for editor. Not priority: it runs in the prompt's queue, after the keys typed before it, so the
    # editor opens on exactly what was typed (see specchat.tui.widgets.prompt)
    KeySpec("edit_in_editor", "alt+e", "edit_in_editor", "Write the message in $EDITOR",
            "open the prompt in $VISUAL or $EDITOR; what you save there is sent (empty or an error: nothing)",
            show=False, priority=False),
    # not priority: Escape must still close dialogs; the prompt does not consume it
    KeySpec("stop", "escape", "stop", "Stop", "stop the reply (the partial reply stays); cancel an edit",
            priority=False),
    # Esc waits ESCDELAY for the rest of an escape sequence (an arrow split by ssh or tmux must not stop the
    # reply: specchat.commands.tui.ESCAPE_DELAY_MS); ctrl+c is a byte no sequence begins with, so it stops at
    # once, in order with the keys before it (typed in one burst after Enter it stops that reply: ChatScreen.
    # action_stop_now). Only while a reply is streaming or a send is on its way (ChatScreen.check_action):
    # elsewhere ctrl+c keeps its meaning (copy in the prompt)
    KeySpec("stop_now", "ctrl+c", "stop_now", "Stop now",
            "while a reply streams: stop it at once (Esc waits a moment for a split arrow key)", show=False),
    KeySpec("regenerate", "ctrl+r", "regenerate", "Regenerate",
            "generate the last reply again (the earlier one is kept: flip with \u2190 \u2192)", show=False),
    KeySpec("new_chat", "ctrl+n", "new_chat", "New chat", "start a new conversation (during a reply: stops it first)",
            show=False),
    KeySpec("history", "ctrl+o", "history", "History", "open, continue, delete, export saved chats", show=False),
    KeySpec("export", "ctrl+s", "export", "Export", "export this chat as Markdown", show=False),
    # as in chat apps: only in an *empty, focused* prompt (ChatScreen.check_action); anywhere else the key
    # keeps its own meaning (up moves the prompt's cursor, scrolls the chat)
    KeySpec(
        "edit_last", "up", "edit_last", "Edit last message",
        "in an empty prompt: edit your last message, resend to replace its reply", show=False,
    ),
    # the versions of the last reply (regenerate keeps the earlier ones): left / right as chat apps do, in an
    # empty prompt only (elsewhere the arrows keep their meaning), and alt+p / alt+n anywhere (alt+letter: see
    # above; no other binding has them). Not priority bindings: a key reaches them in order, after the keys
    # typed before it, once the prompt has stepped aside (PromptInput.check_action)
    KeySpec("reply_prev", "left,alt+p", "reply_prev", "Previous version",
            "show the previous version of the chosen reply (the last, or one chosen with shift+up; left: in an "
            "empty prompt; ctrl+r keeps versions)", show=False, priority=False),
    KeySpec("reply_next", "right,alt+n", "reply_next", "Next version",
            "show the next version of the chosen reply (right: in an empty prompt)", show=False, priority=False),
    # the reply those keys flip: the last, or an earlier one (a reply keeps its versions once the chat goes on).
    # shift+up / shift+down in an empty prompt (elsewhere they select text), alt+u / alt+d anywhere (u up, d
    # down: no other binding has them, and the prompt edits with neither); alt+arrows are not used: Textual
    # reads ESC [1;3A as Escape then up, and Escape stops the reply. Not priority bindings, as above
    KeySpec("reply_earlier", "shift+up,alt+u", "reply_earlier", "Earlier reply",
            "choose the reply before the chosen one, whose versions \u2190 \u2192 flip (shift+up: in an empty prompt)",
            show=False, priority=False),
    KeySpec("reply_later", "shift+down,alt+d", "reply_later", "Later reply",
            "choose the reply after the chosen one (the last is chosen again by a new reply)", show=False,
            priority=False),
    # alt+r: r for race; ctrl+r is regenerate. Also in the palette under its description.
    KeySpec("race", "alt+r", "race", "Race: this message, speculation off vs on",
            "race the prompt's text (or, if it is empty, your last message): speculation off, then on, replayed "
            "side by side", show=False),
    # alt+s: s for server; the app's own action (it swaps the engines: specchat.tui.servers)
    KeySpec("switch_server", "alt+s", "switch_server", "Switch server A / B",
            "with --server and --server-b: the other llama-server answers the next messages (the A/B table compares "
            "them; the race races the two)", show=False),
    KeySpec("quit", "ctrl+q", "quit", "Quit", "quit (stops the reply first)"),
)

#: the race screen's keys (:mod:`specchat.tui.screens.race`): no text input there, so a letter is a key
RACE_KEYS: tuple[KeySpec, ...] = (
    KeySpec("race_close", "escape", "close", "Close", "close the race (while recording: cancel it)"),
    KeySpec("race_replay", "r", "replay", "Replay", "play the recorded race again from the start"),
)

#: the tour screen's keys (:mod:`specchat.tui.screens.tour`)
TOUR_KEYS: tuple[KeySpec, ...] = (
    KeySpec("tour_close", "escape", "close", "Close", "close the tour (a scene being recorded is cancelled)"),
    KeySpec("tour_next", "n,right", "next", "Next scene", "the next scene"),
    KeySpec("tour_previous", "p,left", "previous", "Previous", "the previous scene"),
    KeySpec("tour_replay", "r", "replay", "Replay", "play this scene's race again"),
)

PROMPT_KEYS: tuple[KeySpec, ...] = (
    KeySpec("send", "enter", "submit", "Send", "send the message", show=False),
    KeySpec(
        "newline", "ctrl+j,shift+enter", "newline", "Newline", "insert a new line (ctrl+j works everywhere)", show=False
    ),
)

#: the keymap's groups: the keys of one group must not clash (one screen's bindings); a key may mean one thing
#: in the chat and another on the race or tour screen (the app's bindings step aside there: check_action)
KEY_GROUPS: tuple[tuple[KeySpec, ...], ...] = ((*APP_KEYS, *PROMPT_KEYS), RACE_KEYS, TOUR_KEYS)
ALL_SPECS: dict[str, KeySpec] = {spec.id: spec for group in KEY_GROUPS for spec in group}
ALL_IDS = set(ALL_SPECS)
_GROUP_OF: dict[str, int] = {spec.id: i for i, group in enumerate(KEY_GROUPS) for spec in group}


def app_bindings() -> list[Binding]:
    return [
        Binding(spec.keys, spec.action, spec.description, show=spec.show, id=spec.id, priority=spec.priority)
        for spec in APP_KEYS
    ]


def first_key(keys: Mapping[str, str], binding_id: str, default: str) -> str:
    """The first key a binding has now (``keys``: the keys in effect after the keymap), for the hints shown."""
    return keys.get(binding_id, default).split(",")[0]


def screen_bindings(specs: tuple[KeySpec, ...]) -> list[Binding]:
    """A screen's bindings from its table; remappable by their ids (``race_replay = "space"``: Textual applies
    the app's keymap to every screen's bindings, and :func:`resolve_keymap` knows these ids)."""
    return [
        Binding(spec.keys, spec.action, spec.description, show=spec.show, id=spec.id, priority=spec.priority)
        for spec in specs
    ]


def resolve_keymap(keymap: Mapping[str, str] | None) -> tuple[dict[str, str], list[str]]:
    """Turn ``settings.keymap`` into Textual's ``{binding id: "key1,key2"}`` plus problems to report."""
    result: dict[str, list[str]] = {}
    problems: list[str] = []
    for left, right in (keymap or {}).items():
        if not isinstance(left, str) or not isinstance(right, str) or not left.strip() or not right.strip():
            problems.append(f"keymap entry {left!r} = {right!r} is not two non-empty strings")
            continue
        left, right = left.strip(), right.strip()
        if left in ALL_IDS:
            binding_id, keys = left, right
        elif right in ALL_IDS:
            binding_id, keys = right, left
        else:
            problems.append(
                f"keymap entry {left!r} = {right!r} names no binding; ids are: {', '.join(sorted(ALL_IDS))}"
            )
            continue
        for key in keys.split(","):
            key = key.strip()
            if key and key not in result.setdefault(binding_id, []):
                result[binding_id].append(key)
    problems.extend(_clashes(result))
    problems.extend(_prompt_clashes(result))
    return {binding_id: ",".join(keys) for binding_id, keys in result.items()}, problems


def _clashes(remapped: Mapping[str, list[str]]) -> list[str]:
    """One line per key the keymap gives to a binding while another binding of the same screen still has it."""
    keys_of = {
        binding_id: remapped.get(binding_id) or [k.strip() for k in spec.keys.split(",")]
        for binding_id, spec in ALL_SPECS.items()
    }
    problems: list[str] = []
    for binding_id, keys in remapped.items():
        for key in keys:
            for other, other_keys in keys_of.items():
                if other == binding_id or key not in other_keys or _GROUP_OF[other] != _GROUP_OF[binding_id]:
                    continue
                if other in remapped:  # both given the key by the keymap: report the pair once
                    if other < binding_id:
                        problems.append(
                            f"keymap gives {key} to both {other} and {binding_id}; only one can have it: "
                            "give each its own key"
                        )
                    continue
                rest = [k for k in other_keys if k != key]
                kept = f"keeps {', '.join(rest)}" if rest else "has no key left"
                problems.append(
                    f"keymap gives {key} to {binding_id}, but it is also {other}'s default key: {binding_id} gets "
                    f"it and {other} {kept}; to keep both, give {binding_id} another key"
                )
    return problems


def _prompt_clashes(remapped: Mapping[str, list[str]]) -> list[str]:
    """One line per key the keymap gives to a binding while the prompt (Textual's TextArea) edits with it:
    the app's bindings come first, so ``"ctrl+d" = "k_down"`` silently took the prompt's delete-right. Keys
    the defaults already take from it on purpose (f6, f7, up: see APP_KEYS) are not reported again."""
    taken = {k.strip() for spec in (*APP_KEYS, *PROMPT_KEYS) for k in spec.keys.split(",")}
    editing = {
        key.strip(): binding.description.lower()
        for binding in TextArea.BINDINGS
        if isinstance(binding, Binding)
        for key in binding.key.split(",")
    }
    priority = {spec.id: spec.priority for spec in (*APP_KEYS, *PROMPT_KEYS)}
    outcome = {  # a priority binding comes before the prompt; any other comes after it (reply_prev, stop)
        True: "{b} gets it and the prompt loses it",
        False: "the prompt keeps it while it has the focus, so {b} gets it only elsewhere",
    }
    return [
        f"keymap gives {key} to {binding_id}, but the prompt uses {key} to {editing[key]}: "
        + outcome[priority.get(binding_id, True)].format(b=binding_id)
        + f"; to keep both, give {binding_id} another key"
        for binding_id, keys in remapped.items()
        for key in keys
        if key in editing and key not in taken and _GROUP_OF[binding_id] == 0  # the race and tour have no prompt
    ]
