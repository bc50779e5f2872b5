#!/usr/bin/env python3
"""make_corpus.py - write the seed corpus of the fuzz targets
(tests/fuzz/corpus/<target>/): a few valid inputs of each format and the
edge cases the readers must refuse cleanly (issue 18's cases among them).
Run from anywhere; rewrites the seeds it owns (seed-*) and keeps the
regression inputs (regress-*: past findings, checked in as found).
Usage: make_corpus.py [CORPUS_DIR]"""
import gzip
import json
import os
import struct
import sys

out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "corpus")


def put(target, name, data):
    d = os.path.join(out, target)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(d, "seed-" + name), "wb") as f:
        f.write(data)


def clean():
    for t in ("ini", "idx", "safetensors", "report", "chat", "tokenizer",
              "tokconfig", "hfconfig", "adapter", "prompts", "instruct",
              "token_jsonl", "text"):
        d = os.path.join(out, t)
        if os.path.isdir(d):
            for n in os.listdir(d):
                if n.startswith("seed-"):
                    os.remove(os.path.join(d, n))


clean()

# ---- INI: an experiment file; the first line doubles as a --set ------
put("ini", "valid", """[s]
i = 12
j = -3
f = 0.5
b = false
e = bf16
s = some text ; a comment
p = data/x.idx
r = yes

[run]
epochs = 2
""")
put("ini", "set_first_line", "s.i=7\n[s]\nr = 1\n")
put("ini", "bad_values", """[s]
i = 0x10
f = 1e999
b = maybe
e = fp8
i = 5
r =
j = 99999999999999999999
""")
put("ini", "syntax", "key before section\n[unclosed\n[]\n = v\n[s]\nnovalue\n[s]\n")
put("ini", "bom_crlf", "\ufeff[s]\r\nr = x\r\n  continued\r\nf=.5\r\n")
put("ini", "long_line", "[s]\nr = " + "x" * 5000 + "\n")
put("ini", "typos", "[sx]\nr=1\n[s]\nrr = 1\nIi = 3\n")
put("ini", "no_newline", "[s]\nr=1")
put("ini", "nul", "[s]\nr=a\0b\n")

# ---- IDX: 4-byte magic (0 0 type ndim), big-endian dims, bytes -------


def idx(dims, payload=None, typ=8):
    n = 1
    for d in dims:
        n *= d
    if payload is None:
        payload = bytes(i % 10 for i in range(n))
    return bytes([0, 0, typ, len(dims)]) + b"".join(
        struct.pack(">I", d) for d in dims) + payload


images = idx([3, 4, 4])
labels = idx([3])
put("idx", "images", images)
put("idx", "labels", labels)
put("idx", "images.gz", gzip.compress(images, mtime=0))
put("idx", "labels.gz", gzip.compress(labels, mtime=0))
put("idx", "two_members.gz",
    gzip.compress(labels[:6], mtime=0) + gzip.compress(labels[6:], mtime=0))
put("idx", "gz_trailing", gzip.compress(labels, mtime=0) + b"junk")
put("idx", "gz_truncated", gzip.compress(images, mtime=0)[:-9])
put("idx", "truncated", images[:-5])
put("idx", "trailing", labels + b"\1\2")
put("idx", "type_float", idx([2], b"\0" * 8, typ=0x0D))
put("idx", "huge_dims", bytes([0, 0, 8, 3]) + b"\xff\xff\xff\xff" * 3)
put("idx", "zero_dim", idx([0, 4, 4], b""))
put("idx", "bad_label", idx([2], b"\x07\xff"))
put("idx", "empty", b"")

# ---- safetensors: u64 header length, JSON header, data --------------


def st(header, data=b"", raw=None):
    h = raw if raw is not None else json.dumps(header).encode()
    return struct.pack("<Q", len(h)) + h + data


f32 = struct.pack("<4f", 1, 2, 3, 4)
put("safetensors", "valid", st({
    "__metadata__": {"next_step": "3", "optimizer_step": "3"},
    "w": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]},
    "b": {"dtype": "F64", "shape": [1], "data_offsets": [16, 24]},
}, f32 + struct.pack("<d", 0.5)))
put("safetensors", "zero_length", st({
    "a": {"dtype": "F32", "shape": [0], "data_offsets": [0, 0]},
    "b": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},
}, f32[:4]))
put("safetensors", "meta_array", st({"__metadata__": ["a", "b"]}))
put("safetensors", "meta_number", st({"__metadata__": {"k": 5}}))
put("safetensors", "shape_float", st({
    "w": {"dtype": "F32", "shape": [10.7], "data_offsets": [0, 4]}}, f32))
put("safetensors", "overlap", st({
    "a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
    "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]},
}, f32))
put("safetensors", "out_of_file", st({
    "a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}, f32[:8]))
put("safetensors", "bad_dtype", st({
    "a": {"dtype": "F8", "shape": [1], "data_offsets": [0, 1]}}, b"\0"))
put("safetensors", "huge_shape", st({
    "a": {"dtype": "F64", "shape": [4611686018427387904, 4],
          "data_offsets": [0, 8]}}, b"\0" * 8))
put("safetensors", "header_len_huge", struct.pack("<Q", 1 << 62) + b"{}")
put("safetensors", "not_json", st(None, raw=b"{\"a\": "))
put("safetensors", "short", b"\x02\0\0")

# ---- report: report.json, steps.csv, memory.csv, profile_memcpy.csv,
# separated by lines "%%" ---------------------------------------------
report = {
    "schema": "mgrun-report-2", "status": "finished", "config": "[run]\n",
    "run": {"world": 2, "device": "cpu", "precision": "F32",
            "batch_size": 64, "total_steps": 5, "wall_s": 2.5,
            "train_s": 2.0, "samples_per_s": 160.0,
            "step_s": {"median": 0.4}, "test_accuracy": 0.5},
    "epochs": [{"epoch": 0, "steps": 5, "samples": 320, "seconds": 2.0,
                "test_accuracy": 0.5}],
    "ranks": [{"rank": r, "time_s": {"data": 0.1, "forward": 1.0},
               "memory_peak_bytes": {"params": 100, "total": 300}}
              for r in range(2)],
    "profile": {"metrics": ["gemm", "copy"], "window": {"seconds": 1.5},
                "ranks": [{"gemm": {"count": 3, "seconds": 0.2,
                                    "bytes": 0}}, {"copy": {}}]},
}
cols = ("step,epoch,loss,accuracy,lr,grad_norm,skipped,step_s,data_s,"
        "h2d_s,forward_s,backward_s,comm_exposed_s,comm_overlapped_s,"
        "optimizer_s,mem_bytes,mem_peak_bytes\n")
steps = cols + "".join(
    "%d,0,2.3,0.1,0.01,5,0,0.4,0.01,0,0.2,0.15,0,0,0.04,100,200\n" % i
    for i in range(5))
memory = ("t_s,step,params,grads,optimizer,gather,activations,input,other,"
          "total,host_pinned\n0.5,0,10,0,0,0,0,0,0,10,0\n")
copies = ("t_s,kind,bytes,duration_s\n0.0,h2d,4096,0.0002\n"
          "0.001,d2h,4096,0.00025\n")


def run(*parts):
    return "\n%%\n".join(parts)


put("report", "valid", run(json.dumps(report), steps, memory, copies))
put("report", "report_only", run(json.dumps(report)))
r1 = dict(report, schema="mgrun-report-1")
del r1["run"]["train_s"]
put("report", "schema1", run(json.dumps(r1), steps))
put("report", "wrong_types", run(json.dumps({
    "schema": "mgrun-report-2", "status": 5, "config": ["x"],
    "run": {"world": "two", "total_steps": -1, "step_s": [1]},
    "epochs": {"a": 1}, "ranks": [1, "x", {"time_s": 3}],
    "profile": {"metrics": [1, "m", None], "ranks": [{"m": 2}]}}), steps))
put("report", "csv_ragged", run(json.dumps(report),
                                "step,step_s\n1\n2,0.1,9\n,\n\n3,x\n",
                                "t_s\n", "t_s,kind\n1,h2d"))
put("report", "not_json", run("{\"schema\": ", steps))
put("report", "empty", "")

# chat: the templates of the chat-template corpus (tests/text/chat), and
# the constructs most likely to go wrong: deep nesting, runaway loops and
# recursion, unclosed tags, bad escapes
tdir = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                    "text", "chat", "templates")
for name in sorted(os.listdir(tdir)):
    with open(os.path.join(tdir, name), encoding="utf-8") as f:
        put("chat", name[:-len(".jinja")], f.read())
put("chat", "nesting", "{{ " + "(" * 300 + "1" + ")" * 300 + " }}")
put("chat", "loops", "{% for a in range(9999) %}{% for b in range(9999) %}"
    "{{ a }}{% endfor %}{% endfor %}")
put("chat", "recursion", "{% macro f(n) %}{{ f(n) ~ f(n) }}{% endmacro %}{{ f(1) }}")
put("chat", "unclosed", "{% if x %}{{ 'a' ~ \"\\u12\" }}{# no end")
put("chat", "ws", " {%- if 1 -%} \n {%+ if 2 +%}\n{#- c -#}{{- 3 -}}{% endif %}{% endif %}")

# ---- the LLM inputs: the project's own test files where it has them ---
here = os.path.dirname(os.path.abspath(__file__))
tdata = os.path.join(os.path.dirname(here), "text", "data")


def read(*parts):
    with open(os.path.join(tdata, *parts), "rb") as f:
        return f.read()


# tokenizer: tokenizer.json, a line "%%", a text to encode
texts = ["Hello world! h\u00e9llo <|end|> ab a1b2-ab <L> x <R> <W> B  \t\n",
         "  leading and trailing  ", "\u00e9\u00e9 \U0001F389 \u2581a\u2581b",
         "\n\n\t\t   ", "<s>ab</s><unk>", ""]
toks = sorted(n for n in os.listdir(tdata) if n.endswith(".json"))
for i, name in enumerate(toks):
    put("tokenizer", name[:-5], read(name) + b"\n%%\n" +
        texts[i % len(texts)].encode())
sp = read("sp", "tokenizer.json")
for i, t in enumerate(texts):
    put("tokenizer", "sp_%d" % i, sp + b"\n%%\n" + t.encode())
put("tokenizer", "no_text", read("bytelevel.json"))

# tokconfig: tokenizer_config.json [%% chat request], beside tests/text/
# data/sp/tokenizer.json
put("tokconfig", "sp", read("sp", "tokenizer_config.json"))
for d in sorted(os.listdir(os.path.join(tdata, "chat"))):
    if d.startswith("tok_"):
        put("tokconfig", d, read("chat", d, "tokenizer_config.json"))
put("tokconfig", "template_list", json.dumps({
    "bos_token": "<s>", "eos_token": "</s>", "add_bos_token": False,
    "chat_template": [
        {"name": "tool_use", "template": "{{ tools | tojson }}"},
        {"name": "default", "template":
         "{% for m in messages %}{{ m.role }}: {{ m.content }}\n"
         "{% endfor %}{% if add_generation_prompt %}assistant:{% endif %}"}]}))
put("tokconfig", "added_token_objects", json.dumps({
    "bos_token": {"__type": "AddedToken", "content": "<s>"},
    "eos_token": {"content": "</s>", "lstrip": False},
    "pad_token": "<unk>", "unk_token": "nope",
    "additional_special_tokens": ["<s>", {"content": "</s>"}, 5],
    "chat_template": "{{ bos_token }}{% for m in messages %}"
    "{% generation %}{{ m.content }}{% endgeneration %}{% endfor %}"
    "{{ eos_token }}"}) + "\n%%\n" + json.dumps({
        "messages": [{"role": "user", "content": "ab"},
                     {"role": "assistant", "content": "a b"}],
        "tools": [{"name": "f"}], "add_generation_prompt": False}))
put("tokconfig", "wrong_types", json.dumps({
    "bos_token": 1, "eos_token": ["</s>"], "add_bos_token": "yes",
    "chat_template": {"template": 5}}))

# hfconfig: config.json of the llama architecture
TINY = dict(model_type="llama", vocab_size=256, hidden_size=96,
            intermediate_size=200, num_hidden_layers=2,
            num_attention_heads=6, num_key_value_heads=2, rope_theta=10000.0,
            max_position_embeddings=256, tie_word_embeddings=False,
            rms_norm_eps=1e-5, hidden_act="silu")
put("hfconfig", "tiny", json.dumps(TINY))
L32 = dict(TINY, vocab_size=128256, hidden_size=2048, intermediate_size=8192,
           num_hidden_layers=16, num_attention_heads=32, num_key_value_heads=8,
           head_dim=64, rope_theta=500000.0, tie_word_embeddings=True,
           max_position_embeddings=131072, torch_dtype="bfloat16",
           architectures=["LlamaForCausalLM"], attention_bias=False,
           mlp_bias=False, rope_scaling=dict(
               factor=32.0, high_freq_factor=4.0, low_freq_factor=1.0,
               original_max_position_embeddings=8192, rope_type="llama3"))
put("hfconfig", "llama3.2-1b", json.dumps(L32, indent=2))
put("hfconfig", "transformers5", json.dumps(dict(
    {k: v for k, v in TINY.items() if k != "rope_theta"},
    rope_parameters=dict(rope_type="default", rope_theta=500000.0))))
put("hfconfig", "bad_sizes", json.dumps(dict(
    TINY, num_key_value_heads=4, head_dim=7, vocab_size=2**24,
    hidden_size=2**20)))
put("hfconfig", "inf", json.dumps(TINY).replace("10000.0", "1e999"))
put("hfconfig", "wrong_types", json.dumps(dict(
    TINY, hidden_size="96", rope_scaling=[1], attention_bias=True,
    hidden_act="gelu", model_type=5)))

# adapter: PEFT adapter_config.json
AD = {"peft_type": "LORA", "r": 4, "lora_alpha": 8,
      "target_modules": ["q_proj", "v_proj"], "bias": "none",
      "use_rslora": False, "lora_dropout": 0.0, "task_type": "CAUSAL_LM",
      "base_model_name_or_path": "base", "modules_to_save": None,
      "fan_in_fan_out": False, "use_dora": False, "rank_pattern": {},
      "alpha_pattern": {}, "layers_to_transform": None}
put("adapter", "peft", json.dumps(AD, indent=2))
put("adapter", "all_linear", json.dumps(dict(
    AD, target_modules="all-linear", use_rslora=True, lora_alpha=16.5)))
put("adapter", "regex_targets", json.dumps(dict(
    AD, target_modules=".*proj")))
put("adapter", "refused", json.dumps(dict(
    AD, use_dora=True, rank_pattern={"q_proj": 8}, bias="all")))
put("adapter", "wrong_types", json.dumps(dict(
    AD, r=4.5, lora_alpha="8", use_rslora=1, target_modules=[1, "a,b"])))

# prompts: the first byte picks the tokenizer (even: the test one)
put("prompts", "mixed", "0" + "\n".join([
    json.dumps({"prompt": "Hello ab", "id": 1}), "",
    json.dumps({"ids": [1, 6, 7], "id": {"k": [1, None]}}), "  \r",
    json.dumps({"prompt": "a\u00e9b <s>"})]))
put("prompts", "no_tokenizer", "1" + json.dumps({"ids": [1, 2]}) + "\n" +
    json.dumps({"prompt": "x"}) + "\n")
put("prompts", "bad_lines", "0" + "\n".join([
    '{"prompt": "a", "ids": [1]}', '{"ids": [-1, 2.5, 1e300]}',
    '{"prompt": "a\\u0000b"}', '{"prompt": "a"} {"prompt": "b"}', "[1]",
    '{"ids": []}', '{"prompt": ""}']))
put("prompts", "crlf", "0" + json.dumps({"prompt": "ab"}) + "\r\n" +
    json.dumps({"ids": [5]}) + "\r\n")

# instruct: two option bytes (format, template, flags: fuzz_instruct.c),
# then a JSON Lines or JSON array file, maybe gzipped


def jl(rows):
    return "\n".join(json.dumps(r) for r in rows) + "\n"


alpaca = [{"instruction": "Say ab", "input": "", "output": "ab"},
          {"instruction": "Repeat", "input": "a b", "output": "a b a b"},
          {"instruction": "\u00e9", "input": "x", "output": "y"}]
samsum = [{"id": "1", "dialogue": "A: ab\nB: a", "summary": "ab a"}]
grammar = [{"input": "a  b", "output": "a b"}]
sharegpt = [{"conversations": [
    {"from": "system", "value": "be brief"},
    {"from": "human", "value": "ab?"}, {"from": "gpt", "value": "a b"},
    {"from": "human", "value": "b?"}, {"from": "gpt", "value": "b"}]}]
messages = [{"messages": [
    {"role": "user", "content": "ab"}, {"role": "assistant", "content": "a"},
    {"role": "user", "content": "b"}, {"role": "assistant", "content": ""}]}]
pref = [{"prompt": "ab?", "chosen": "a b", "rejected": "b a"}]
pref_msgs = [{"chosen": [{"role": "user", "content": "ab"},
                         {"role": "assistant", "content": "a"}],
              "rejected": [{"role": "user", "content": "ab"},
                           {"role": "assistant", "content": "b"}]}]
# byte 0: format (a % 7), template (a / 7 % 5); byte 1: flags, length
for name, a, rows in (("alpaca", 1, alpaca), ("samsum", 2, samsum),
                      ("grammar", 3, grammar), ("sharegpt", 4 + 7, sharegpt),
                      ("messages", 5 + 14, messages),
                      ("preference", 6, pref), ("pref_msgs", 6 + 21, pref_msgs),
                      ("auto_alpaca", 0, alpaca), ("auto_chat", 0, messages)):
    put("instruct", name, bytes([a, 0x40]) + jl(rows).encode())
put("instruct", "array", bytes([0, 0x46]) + json.dumps(alpaca).encode())
put("instruct", "packed_drop", bytes([0x80, 0x03]) + jl(alpaca * 4).encode())
put("instruct", "gz", bytes([1, 0x40]) + gzip.compress(jl(alpaca).encode(),
                                                       mtime=0))
put("instruct", "columns", bytes([35, 0x40]) + jl(
    [{"question": "ab", "output": "a", "answer": "b"}]).encode())
put("instruct", "bad_rows", bytes([0, 0x40]) + (
    '{"instruction": "a", "output": 5}\n{"messages": "x"}\n'
    '{"instruction": "a\\u0000b", "output": "c"}\n[1, 2]\n{"a": \n'
    '{"instruction": "a", "output": "b"} {"instruction": "c"}\n').encode())

# token_jsonl: one option byte (seq_len, vocab_size, a test file), then
# JSON Lines of input_ids (labels, position_ids)
put("token_jsonl", "plain", b"\x10" + jl([
    {"input_ids": [1, 2, 3, 4]}, {"input_ids": [5, 6]}]).encode())
put("token_jsonl", "labels", b"\x11" + jl([
    {"input_ids": [1, 2, 3, 4], "labels": [-100, -100, 3, 4]},
    {"input_ids": [7, 8, 9], "labels": [7, 8, 9]}]).encode())
put("token_jsonl", "packed", b"\x20" + jl([
    {"input_ids": [1, 2, 3, 4, 5], "position_ids": [0, 1, 0, 1, 2],
     "labels": [-100, 2, -100, 4, 5]}]).encode())
put("token_jsonl", "bad", b"\x00" + (
    '{"input_ids": [1, 2.5]}\n{"input_ids": [], "labels": []}\n'
    '{"input_ids": [1, 2], "position_ids": [1, 0]}\n{"input_ids": [1e20]}\n'
    '{"input_ids": [1, 2]} {"input_ids": [3]}\n\n{"input_ids": [3, 4]').encode())
put("token_jsonl", "long_row", b"\x00" + jl([
    {"input_ids": list(range(200))}]).encode())
put("token_jsonl", "all_ignored", b"\x00" + jl([
    {"input_ids": [1, 2], "labels": [-100, -100]}]).encode())

# text: one option byte (separator, seq_len), then the text
put("text", "fortunes", b"\x01" + "ab a\n%\nb a b\n\u00e9\n%\n\n%\naaa bbb\n"
    .encode())
put("text", "plain", b"\x00" + b"ab ab ab a b\n" * 20)
put("text", "gz", b"\x01" + gzip.compress(b"ab\n%\nba\n%\nab ab\n", mtime=0))
put("text", "bad_utf8", b"\x00" + b"ab\xff\xfe a\xc3")
put("text", "nul", b"\x00ab\x00ab")
