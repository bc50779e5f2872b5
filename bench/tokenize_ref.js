// tokenize_ref.js - the JavaScript references' encode speed for
// bench/tokenize.sh: loads one tokenizer, then times encoding every line
// of the text file (add_special_tokens=False), load excluded. Prints
// "bytes wall_seconds cpu_seconds ntokens"; CPU is the process's user +
// system time (node's helper threads, the garbage collector's, included).
//
// usage: node tokenize_ref.js NODE_MODULES lenml-llama3|lenml-llama2|
//        llama3-tokenizer-js TEXT_FILE
"use strict";
const fs = require("fs");
const path = require("path");

async function main() {
  const [nm, which, file] = process.argv.slice(2);
  const buf = fs.readFileSync(file);
  const lines = buf.toString("utf8").split("\n");
  let enc;
  if (which === "llama3-tokenizer-js") {
    const t = (await import(path.join(nm, "llama3-tokenizer-js", "bundle",
      "llama3-tokenizer-with-baked-data.js"))).default;
    enc = (s) => t.encode(s, { bos: false, eos: false });
  } else {
    const t = require(path.join(nm, "@lenml",
      which.replace("lenml-", "tokenizer-"))).fromPreTrained();
    enc = (s) => t.encode(s, { add_special_tokens: false });
  }
  enc("warm up the code paths, 123 numbers and ünïcödé");
  const t0 = process.hrtime.bigint();
  const c0 = process.cpuUsage();
  let n = 0;
  for (const l of lines) n += enc(l).length;
  const c = process.cpuUsage(c0);
  const dt = Number(process.hrtime.bigint() - t0) / 1e9;
  const cpu = (c.user + c.system) / 1e6;
  console.log(`${buf.length} ${dt.toFixed(4)} ${cpu.toFixed(4)} ${n}`);
}
main().catch((e) => { console.error(e); process.exit(1); });
