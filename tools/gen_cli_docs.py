#!/usr/bin/env python3
"""gen_cli_docs.py — the man page and the bash / zsh completions of `redlite`, generated from the
binary's own help, which src/cli/opts.c renders from its option table: help, man page and
completions cannot drift apart (help2man's approach; no second copy of the table to keep).

    python3 tools/gen_cli_docs.py build/redlite OUTDIR
writes OUTDIR/redlite.1, OUTDIR/redlite.bash and OUTDIR/_redlite. `make install` runs it.
The output depends only on the binary's help text (no dates), so the build is reproducible.
"""
import os
import re
import subprocess
import sys


def run_help(binary, *args):
    r = subprocess.run([binary, *args, "--help"], capture_output=True, text=True, timeout=60)
    return r.stdout + (r.stderr if not r.stdout else "")


def parse_top(text):
    """(tagline, [(command, summary)]) from `redlite --help`."""
    tagline = text.splitlines()[0].split("—", 1)[-1].strip()
    cmds, inside = [], False
    for line in text.splitlines():
        if line.strip() == "commands:":
            inside = True
            continue
        if inside:
            m = re.match(r"^  (\S+)\s+(.*)$", line)
            if not m:
                if cmds:
                    break
                continue
            cmds.append((m.group(1), m.group(2).strip()))
    return tagline, cmds


def parse_cmd(text):
    """A command's help: usage line, description paragraphs, [(section, [(names, value, help)])],
    and the text after the options (notes)."""
    lines = text.splitlines()
    usage = next((l[len("usage: "):] for l in lines if l.startswith("usage: ")), "")
    desc, sections, notes = [], [], []
    cur = None
    i = 1 if lines and lines[0].startswith("usage: ") else 0
    state = "desc"
    for line in lines[i:]:
        if re.match(r"^[A-Za-z].*:$", line):  # a section heading ("input:", "sampling (...):")
            cur = (line[:-1], [])
            sections.append(cur)
            state = "opts"
            continue
        if state == "desc" and re.match(r"^  -[^ -]|^  --\w", line):  # options without a heading
            cur = ("options", [])
            sections.append(cur)
            state = "opts"
        if state == "opts" and cur is not None:
            m = re.match(r"^  (-[^ ].*?)(?:\s{2,}(.*))?$", line)
            if m:
                head, help_ = m.group(1), (m.group(2) or "")
                # "-m, --model FILE": split the value name off the last name
                parts = head.split(", ")
                last = parts[-1].split(" ", 1)
                value = last[1] if len(last) > 1 else ""
                names = parts[:-1] + [last[0]]
                cur[1].append([names, value, help_])
                continue
            if line.startswith("    ") and cur[1]:
                cur[1][-1][2] = (cur[1][-1][2] + " " + line.strip()).strip()
                continue
            if not line.strip():
                continue
            state = "notes"
        if state == "desc":
            desc.append(line)
        elif state == "notes":
            notes.append(line)
    return usage, "\n".join(desc).strip(), sections, "\n".join(notes).strip()


def roff(s):
    s = s.replace("\\", "\\e").replace("-", "\\-")
    return "\n".join(("\\&" + l if l.startswith((".", "'")) else l) for l in s.splitlines())


def man_page(version, tagline, cmds, helps):
    out = [f'.TH REDLITE 1 "" "redlite {version}" "User Commands"', ".SH NAME",
           f"redlite \\- {roff(tagline)}", ".SH SYNOPSIS", ".B redlite", "\\fIcommand\\fR [\\fIoptions\\fR]",
           ".SH DESCRIPTION",
           "Red Lite runs Qwen3\\-Next (Gated\\-DeltaNet mixture\\-of\\-experts) GGUF models on the CPU "
           "(x86 SIMD) or a CUDA GPU, with a bounded expert cache for models larger than memory, exact "
           "speculative decoding and an OpenAI / Anthropic compatible server.",
           ".SH COMMANDS"]
    for name, summary in cmds:
        out += [".TP", f"\\fB{roff(name)}\\fR", roff(summary)]
    for name, _ in cmds:
        usage, desc, sections, notes = helps[name]
        out += [f'.SH "REDLITE {name.upper()}"']
        if usage:
            out += [".nf", roff(usage), ".fi"]
        if desc:
            out += [".PP", roff(desc)]
        for sec, opts in sections:
            out += [f".SS {roff(sec)}"]
            for names, value, help_ in opts:
                head = ", ".join(f"\\fB{roff(n)}\\fR" for n in names) + (f" \\fI{roff(value)}\\fR" if value else "")
                out += [".TP", head, roff(help_) if help_ else ""]
        if notes:
            out += [".PP", ".nf", roff(notes), ".fi"]
    out += [".SH EXIT STATUS", "0 success, 1 runtime error (a file, memory, the engine), 2 usage error.",
            ".SH FILES", "\\fImodels/default.gguf\\fR in the source tree: the bundled tiny model.",
            ".SH SEE ALSO", "The guides in the source tree: README.md, docs/MODELS.md, docs/CHAT.md, docs/SERVER.md.",
            ""]
    return "\n".join(out)


def options_of(sections):
    return [(n, v, h) for _, opts in sections for names, v, h in opts for n in names]


FILE_HINT = re.compile(r"FILE|DIR|PATH")


def bash_completion(cmds, helps):
    out = ["# bash completion for redlite (generated by tools/gen_cli_docs.py from the commands' --help)",
           "_redlite() {",
           "    local cur prev cmd",
           '    cur="${COMP_WORDS[COMP_CWORD]}"',
           '    prev="${COMP_WORDS[COMP_CWORD-1]}"',
           '    cmd="${COMP_WORDS[1]}"',
           "    if [ \"$COMP_CWORD\" -eq 1 ]; then",
           f'        COMPREPLY=($(compgen -W "{" ".join(c for c, _ in cmds)} help --help --version" -- "$cur"))',
           "        return",
           "    fi",
           '    case "$cmd" in']
    for name, _ in cmds:
        opts = options_of(helps[name][2])
        files = sorted({n for n, v, _ in opts if FILE_HINT.search(v)})
        words = " ".join(sorted({n for n, _, _ in opts} | {"--help"}))
        out.append(f"    {name})")
        if files:
            out += [f'        case "$prev" in {"|".join(files)}) COMPREPLY=($(compgen -f -- "$cur")); return ;; esac']
        out += [f'        COMPREPLY=($(compgen -W "{words}" -- "$cur")) ;;']
    out += ["    esac", "}", "complete -o default -F _redlite redlite", ""]
    return "\n".join(out)


def zsh_quote(s):
    return s.replace("'", "'\\''").replace("[", "(").replace("]", ")").replace(":", ";")


def zsh_completion(cmds, helps):
    out = ["#compdef redlite", "# zsh completion for redlite (generated by tools/gen_cli_docs.py from the commands' --help)",
           "_redlite() {", "    local -a cmds", "    cmds=("]
    out += [f"        '{zsh_quote(c)}:{zsh_quote(s)}'" for c, s in cmds]
    out += ["    )", "    if (( CURRENT == 2 )); then", "        _describe 'command' cmds", "        return", "    fi",
            "    case $words[2] in"]
    for name, _ in cmds:
        specs = []
        for n, v, h in options_of(helps[name][2]):
            act = ":file:_files" if FILE_HINT.search(v) else (f":{zsh_quote(v)}: " if v else "")
            specs.append(f"'{n}[{zsh_quote(h[:70])}]{act}'")
        out.append(f"    {name})")
        out.append("        _arguments -s " + " ".join(specs + ["'*:file:_files'"]) + " ;;")
    out += ["    esac", "}", '_redlite "$@"', ""]
    return "\n".join(out)


def main():
    if len(sys.argv) != 3:
        print("usage: gen_cli_docs.py REDLITE_BINARY OUTDIR", file=sys.stderr)
        return 2
    binary, outdir = sys.argv[1], sys.argv[2]
    top = run_help(binary)
    version = top.split()[1] if top.startswith("redlite ") else "unknown"
    tagline, cmds = parse_top(top)
    if not cmds:
        print(f"gen_cli_docs: no command list in `{binary} --help`", file=sys.stderr)
        return 1
    helps = {c: parse_cmd(run_help(binary, c)) for c, _ in cmds}
    os.makedirs(outdir, exist_ok=True)
    for fname, text in (("redlite.1", man_page(version, tagline, cmds, helps)),
                        ("redlite.bash", bash_completion(cmds, helps)), ("_redlite", zsh_completion(cmds, helps))):
        with open(os.path.join(outdir, fname), "w") as f:
            f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
