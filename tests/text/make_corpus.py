#!/usr/bin/env python3
"""make_corpus.py - the varied texts the tokenizer is checked on against
the JavaScript references: fortunes (Debian's fortunes packages, English
prose with newlines and tabs), code, numbers and digit runs, whitespace
runs, many scripts, emoji (ZWJ sequences, flags, skin tones) and the
special-token strings of both files. Writes one JSON string per line
(mgrun tokenize --json). Deterministic: a fixed seed.

usage: make_corpus.py [N_FORTUNES] > corpus.jsonl
"""
import glob
import json
import os
import random
import sys

rng = random.Random(14)
texts = []

# Fortunes: records separated by a line holding "%".
fortunes = []
for path in sorted(glob.glob("/usr/share/games/fortunes/*")):
    if os.path.isdir(path) or path.endswith((".dat", ".u8")):
        continue
    try:
        with open(path, encoding="utf-8") as f:
            data = f.read()
    except (UnicodeDecodeError, OSError):
        continue
    fortunes += [r.strip("\n") for r in data.split("\n%\n") if r.strip()]
n_fortunes = int(sys.argv[1]) if len(sys.argv) > 1 else 250
if fortunes:
    texts += rng.sample(fortunes, min(n_fortunes, len(fortunes)))
else:
    print("make_corpus.py: no fortunes in /usr/share/games/fortunes "
          "(apt-get install fortunes)", file=sys.stderr)

code = [
    'def f(x):\n    return x ** 2  # square\n\nprint(f(3))\n',
    'int main(void)\n{\n\tprintf("%d\\n", 42);\n\treturn 0;\n}\n',
    'for (i = 0; i < n; i++) { a[i] += b[i] * c; }',
    '<div class="x">&nbsp;</div>\r\n<script>let s = `${a}`;</script>',
    'SELECT id, name FROM users WHERE age >= 18 ORDER BY name;',
    '    if (err) {\n        return -EINVAL;\n    }\n',
    "x = {'key': [1, 2.5, -3e10], \"k2\": None}",
    '#!/bin/sh\nset -eu\nfor f in *.txt; do wc -l "$f"; done\n',
    'fn main() { let v: Vec<u8> = vec![0xff, 0x00]; println!("{:?}", v); }',
    '```python\nimport numpy as np\nnp.zeros((3, 4))\n```',
    "const re = /^[a-z0-9_-]{3,16}$/i; // user names",
    "C:\\Users\\me\\file.txt and /usr/local/bin/mgrun --help",
    "I'm sure they've said it's what we'd do; YOU'LL SEE, it'S fine.",
]
numbers = [
    "1", "12", "123", "1234", "12345", "123456789012345678901234567890",
    "3.14159265358979", "-0.0001", "1,000,000", "1e-9 2E+10",
    "phone: +1 (555) 123-4567", "2026-11-24T05:31:08Z", "0x1F 0b1010 0o777",
    "v1.2.3-rc.4", "١٢٣٤٥ ٦٧٨٩٠", "१२३४५", "一二三 123 ４５６",
    "Ⅻ ½ ¾ ² ³", "$1.99 €2,50 £3 ¥400 ₹50",
]
spaces = [
    " ", "  ", "   leading", "trailing   ", "a  b   c    d", "\t", "\t\tx\t",
    "\n", "\n\n\n", "line1\nline2\r\nline3\rline4", " \n \n ", "a \n b",
    "x\u00a0y\u2003z\u3000w", "tab\tand  two", "        eight spaces",
    "end with newline\n", "\r\n", " \t \t ", "a\u200bb", "\ufeffbom",
    "",
]
scripts = [
    "日本語のテキストです。東京は大きな都市です。",
    "中文文本：我爱北京天安门。", "한국어 문장입니다. 안녕하세요!",
    "مرحبا بالعالم، هذا نص عربي.", "שלום עולם", "नमस्ते दुनिया, यह हिंदी है।",
    "Привет, мир! Это русский текст.", "Γειά σου Κόσμε! Ελληνικά.",
    "สวัสดีชาวโลก ภาษาไทย", "Xin chào thế giới! Tiếng Việt có dấu.",
    "Türkçe: çğıöşü ÇĞİÖŞÜ", "Ελληνικά και English mixed 混合",
    "ქართული ენა", "Հայերեն", "தமிழ் மொழி", "বাংলা ভাষা",
    "ትግርኛ ኣማርኛ", "ᚠᚢᚦᚨᚱᚲ runes", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𝕄𝕒𝕥𝕙 𝟙𝟚𝟛",
    "Zalgo: Z̷̢a̸l̵g̶o̴", "e\u0301 vs \u00e9 (combining)", "ﬁ ligature ﬀ",
    "Ünïcödé àéîõü ÀÉÎÕÜ ñ ß", "Ǆ ǅ ǆ titlecase", "İstanbul ıi",
]
emoji = [
    "👋🌍", "👨‍👩‍👧‍👦 family", "🏳️‍🌈 flag", "👍🏽 thumbs", "🇫🇷🇩🇪🇯🇵",
    "❤️‍🔥", "🧑‍💻 coding 🤖", "emoji at end 😀", "😀😃😄😁😆😅🤣😂",
    "1️⃣ #️⃣ *️⃣", "©️ ®️ ™️", "🐈‍⬛",
]
specials = [
    "<|begin_of_text|>Hello", "<|eot_id|>", "text<|eot_id|>more",
    "<|start_header_id|>user<|end_header_id|>\n\nHi!<|eot_id|>",
    "<s>", "</s>", "<unk>", "a <s> b", "<s>[INST] Hello [/INST]",
    "[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\nWhat is 2+2? [/INST]",
    "<|reserved_special_token_5|>", "<|not_a_token|>", "<|eot_id",
    "<<s>>", "<s><s></s>", "Hello <s> world  x", "<0x41> <0xFF>",
    "<|end_of_text|> <|end_of_text|>",
]
texts += code + numbers + spaces + scripts + emoji + specials

# Mixtures: pieces of the lists above glued with random separators.
pool = code + numbers + scripts + emoji + specials + fortunes[:2000]
for _ in range(120):
    k = rng.randint(2, 5)
    sep = rng.choice([" ", "", "\n", "  ", "\t", ", ", " - "])
    texts.append(sep.join(rng.choice(pool) for _ in range(k)))
# Long single lines (a SentencePiece file sees a line as one word).
for _ in range(5):
    texts.append(" ".join(rng.sample(fortunes or scripts, 40)))

for t in texts:
    print(json.dumps(t))
