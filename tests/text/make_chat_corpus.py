#!/usr/bin/env python3
"""make_chat_corpus.py - the chat-template corpus the C interpreter
(core/text/jinja_*.c) is tested against (tests/text/test_chat_template.c).

Renders every template of tests/text/chat/templates/ against every
conversation below with jinja2 3.1 configured exactly as transformers'
apply_chat_template configures it (ImmutableSandboxedEnvironment,
trim_blocks, lstrip_blocks, loopcontrols, transformers' tojson /
raise_exception / strftime_now and its {% generation %} tag), and writes
tests/text/data/chat/corpus.jsonl:

  {"template": NAME, "source": TEXT}                      one per template
  {"template": NAME, "case": ID, "vars": {...}, "output": TEXT}
  {"template": NAME, "case": ID, "vars": {...}, "error": MESSAGE,
   "raised": true|false}     raised: from raise_exception (the C message
                             must contain it); else any error will do

Also the real Llama 3 template when .deps/tokenizers/llama3 is there
(scripts/fetch-tokenizers.sh). Run from anywhere: python3
tests/text/make_chat_corpus.py. CI only reads the stored output.
"""
import json
import os
import sys
from datetime import datetime

import jinja2
from jinja2.ext import Extension, loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


class AssistantTracker(Extension):
    """transformers' {% generation %}: renders its body (the tracking of
    assistant spans is left to the C side's own test)."""
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return jinja2.nodes.CallBlock(
            self.call_method("_render", []), [], [], body).set_lineno(lineno)

    def _render(self, caller):
        return caller()


def compile_template(src):
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None,
               sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent,
                          separators=separators, sort_keys=sort_keys)

    def strftime_now(fmt):
        return datetime.now().strftime(fmt)

    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True,
        extensions=[AssistantTracker, loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env.from_string(src)


TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city.",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string", "description": "The city, e.g. Zürich"},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
            "required": ["city"]}}},
    {"type": "function", "function": {
        "name": "add", "description": "Add two numbers.",
        "parameters": {"type": "object", "properties": {
            "a": {"type": "number"}, "b": {"type": "number"}},
            "required": ["a", "b"]}}},
]

S = {"role": "system", "content": "You are a helpful assistant."}
U1 = {"role": "user", "content": "Hello!"}
A1 = {"role": "assistant", "content": "Hi there. How can I help?"}
U2 = {"role": "user", "content": "  Write a haiku\nabout autumn.\n\n  "}
A2 = {"role": "assistant",
      "content": "Leaves fall, one by one\n\tcrimson \"quiet\" \\ drifting\nthe year exhales slow"}
UNI = {"role": "user", "content": "Ünïcödé: 日本語のテキスト, emoji 🎉🚀, Ελληνικά, и кириллица"}
AUNI = {"role": "assistant", "content": "Réponse: «bien sûr» — 好的 ✓"}
TC = {"role": "assistant", "content": "",
      "tool_calls": [{"type": "function", "function": {
          "name": "get_weather", "arguments": {"city": "Zürich", "unit": "celsius"}}}]}
TCS = {"role": "assistant", "content": None,
       "tool_calls": [{"type": "function", "function": {
           "name": "add", "arguments": "{\"a\": 1, \"b\": 2.5}"}}]}
TR = {"role": "tool", "name": "get_weather", "content": "{\"temperature\": 21.5, \"sky\": \"clear\"}"}
TR2 = {"role": "tool", "name": "add", "content": "3.5"}
THINK = {"role": "assistant",
         "content": "<think>\nThe user greets me.\n</think>\n\nHello! Nice to meet you."}

CONVERSATIONS = {
    "single": {"messages": [U1]},
    "system": {"messages": [S, U1]},
    "multi": {"messages": [S, U1, A1, U2, A2]},
    "no_system_multi": {"messages": [U1, A1, U2]},
    "unicode": {"messages": [UNI, AUNI, U1]},
    "tools": {"messages": [S, {"role": "user", "content": "Weather in Zürich?"}, TC, TR],
              "tools": TOOLS},
    "tools_no_system": {"messages": [{"role": "user", "content": "1 + 2.5?"}, TCS, TR2,
                                     {"role": "assistant", "content": "It is 3.5."}],
                        "tools": TOOLS},
    "two_tool_results": {"messages": [U1, TC, TR, TR2]},
    "thinking": {"messages": [U1, THINK, U2]},
    "thinking_off": {"messages": [U1], "enable_thinking": False},
    "bad_order": {"messages": [U1, U2]},
    "assistant_first": {"messages": [A1, U1]},
    "system_only": {"messages": [S]},
    "odd_role": {"messages": [{"role": "narrator", "content": "Once upon a time"}, U1]},
    "list_content": {"messages": [{"role": "user", "content": [
        {"type": "image"}, {"type": "text", "text": "  What is in this picture? "}]}]},
    "date": {"messages": [S, U1], "date_string": "01 Jan 2025"},
    "empty_content": {"messages": [{"role": "user", "content": ""}, {"role": "assistant", "content": ""}]},
}

SPECIALS = {
    "default": {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"},
    "llama3": {"bos_token": "<|begin_of_text|>", "eos_token": "<|end_of_text|>"},
    "qwen": {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"},
    "gemma": {"bos_token": "<bos>", "eos_token": "<eos>", "unk_token": "<unk>",
              "pad_token": "<pad>"},
    "phi3": {"bos_token": "<s>", "eos_token": "<|endoftext|>", "unk_token": "<unk>",
             "pad_token": "<|endoftext|>"},
}


def load_templates():
    out = []
    tdir = os.path.join(HERE, "chat", "templates")
    for name in sorted(os.listdir(tdir)):
        if not name.endswith(".jinja"):
            continue
        with open(os.path.join(tdir, name), encoding="utf-8") as f:
            out.append((name[:-6], f.read()))
    real = os.path.join(ROOT, ".deps", "tokenizers", "llama3", "tokenizer_config.json")
    if os.path.exists(real):
        with open(real, encoding="utf-8") as f:
            out.append(("llama3-real", json.load(f)["chat_template"]))
    else:
        print("make_chat_corpus: no .deps/tokenizers/llama3: the real Llama 3 "
              "template is left out (scripts/fetch-tokenizers.sh)", file=sys.stderr)
    return out


def specials_for(name):
    for k in SPECIALS:
        if name.startswith(k):
            return SPECIALS[k]
    return SPECIALS["default"]


def main():
    lines = []
    for name, src in load_templates():
        lines.append({"template": name, "source": src})
        tpl = compile_template(src)
        for cid, conv in CONVERSATIONS.items():
            for agp in (False, True):
                v = dict(specials_for(name))
                v.update({"tools": None, "documents": None})
                v.update(conv)
                v["add_generation_prompt"] = agp
                rec = {"template": name, "case": "%s/%s" % (cid, "gen" if agp else "nogen"),
                       "vars": v}
                try:
                    rec["output"] = tpl.render(**v)
                except Exception as e:  # noqa: BLE001
                    if type(e) is jinja2.exceptions.TemplateError:  # raise_exception
                        rec["error"], rec["raised"] = str(e), True
                        lines.append(rec)
                        continue  # TypeError and the like
                    rec["error"], rec["raised"] = "%s: %s" % (type(e).__name__, e), False
                lines.append(rec)
    path = os.path.join(HERE, "data", "chat", "corpus.jsonl")
    with open(path, "w", encoding="utf-8") as f:
        for rec in lines:
            f.write(json.dumps(rec, ensure_ascii=False) + "\n")
    print("make_chat_corpus: %d lines in %s (jinja2 %s)" % (len(lines), path, jinja2.__version__))


if __name__ == "__main__":
    main()
