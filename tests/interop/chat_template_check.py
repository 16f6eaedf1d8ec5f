#!/usr/bin/env python3
"""Chat documents into token ids and a loss mask (src/spm/frugal_chat.py, run through
frugal_hf_tokenizer.py's `chat` command) against transformers' apply_chat_template.

A byte-level BPE tokenizer trained here with `tokenizers` (chat special tokens added) and saved by
transformers' PreTrainedTokenizerFast, with three chat templates:
1. ChatML with `{% generation %}` blocks: the ids and the loss mask are apply_chat_template's
   input_ids and assistant_masks (return_assistant_tokens_mask=True), document by document.
2. Llama-3 style and 3. Qwen (ChatML) style, without generation blocks: the ids are
   apply_chat_template's; the mask is the prefix rule's, computed here independently from
   apply_chat_template's renderings of the prefixes, and the tokens it trains on decode to each
   assistant message's content followed by the template's end-of-turn token.
4. prompt-completion: the prompt's ids, then the completion's and the end-of-text token, trained on
   the latter; with train-on-prompt every token; a conversation without an assistant message and a
   template that renders no growing prefix exit 2 naming the document; so do a message's field of the
   wrong type (by index and field) and a mistyped role (the roles seen); a template that does not parse
   and a tokenizer folder without one exit 2 naming the file or folder.
5. `frugal prepare --format chat` stores, document by document in order (`frugal inspect --json`),
   apply_chat_template's ids and assistant mask; --chat-template FILE renders with that template,
   which the dataset keeps and `frugal export` of a run on it writes as the tokenizer's own;
   --max-tokens with --overflow truncate / split cut documents and count them, and one that leaves no
   document a target exits 2 naming --max-tokens and publishes nothing; a second run is up to
   date, and so is one with --tokenizer hf:DIR for hf:DIR/tokenizer.json, but not one after the tokenizer
   folder's chat template was edited (it renders with the new one); bad lines, a conversation
   without an assistant message and a tokenizer without a chat template exit 2 naming the file and
   line (or the flag); `frugal train` on it (data.source = shards:DIR) runs and evaluates, and with a
   model.block that cuts every document before its first trained token exits 2 saying so.

Usage: chat_template_check.py FRUGAL_BINARY SRC_SPM_DIR. Exits 77 (skipped) when transformers, tokenizers or
jinja2 is not installed.
"""
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

from interop_common import Check

try:
    import jinja2  # noqa: F401
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast
    from transformers.utils import logging as hf_logging
except ImportError as e:
    print(f"skipped: {e} (scripts/install-deps.sh installs it)")
    sys.exit(77)

hf_logging.set_verbosity_error()
CHECK = Check("chat_template_check")
fail = CHECK.fail
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|begin_of_text|>", "<|start_header_id|>",
           "<|end_header_id|>", "<|eot_id|>"]

CHATML_MARKED = (
    "{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' }}"
    "{% if m['role'] == 'assistant' %}{% generation %}{{ m['content'] + '<|im_end|>' }}{% endgeneration %}"
    "{% else %}{{ m['content'] + '<|im_end|>' }}{% endif %}{{ '\\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")
LLAMA3 = (
    "{{ bos_token }}{% for m in messages %}{{ '<|start_header_id|>' + m['role'] + '<|end_header_id|>\\n\\n' + "
    "m['content'] | trim + '<|eot_id|>' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}")
QWEN = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}{% endif %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")
END = {"chatml": "<|im_end|>", "llama3": "<|eot_id|>", "qwen": "<|im_end|>"}

CONVERSATIONS = [
    [{"role": "user", "content": "What is the capital of France?"},
     {"role": "assistant", "content": "Paris. It is also the largest city."}],
    [{"role": "system", "content": "Answer briefly."}, {"role": "user", "content": "2 + 2?"},
     {"role": "assistant", "content": "4"}, {"role": "user", "content": "And 3 + 3? Say it twice: 4 4"},
     {"role": "assistant", "content": "6, and again: 6"}],
    [{"role": "user", "content": "naïve café, 日本語, emoji 🙂"}, {"role": "assistant", "content": "Noted: 🙂 café"}],
]


def make_tokenizer(d):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    text = [m["content"] for c in CONVERSATIONS for m in c] * 20 + ["the system user assistant answer"] * 20
    tok.train_from_iterator(text, trainers.BpeTrainer(vocab_size=400, special_tokens=SPECIAL,
                                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    return tok


def save(tok, d, template):
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|begin_of_text|>", eos_token="<|endoftext|>")
    fast.chat_template = template
    fast.save_pretrained(d)
    return PreTrainedTokenizerFast.from_pretrained(d)


def helper(spm, d, kind, docs, extra=(), expect=0, template="-"):
    src, dst = os.path.join(d, "in.bin"), os.path.join(d, "out.bin")
    with open(src, "wb") as f:
        for doc in docs:
            b = json.dumps(doc, ensure_ascii=False).encode()
            f.write(struct.pack("<Q", len(b)) + b)
    p = subprocess.run([sys.executable, os.path.join(spm, "frugal_hf_tokenizer.py"), "chat",
                        os.path.join(d, "tokenizer.json"), template, kind, src, dst, *extra],
                       capture_output=True, text=True)
    if p.returncode != expect:
        fail(f"the chat helper exited {p.returncode}, expected {expect}: {p.stderr[-1500:]}")
    if expect:
        return p.stderr
    data, off, out = open(dst, "rb").read(), 0, []
    while off < len(data):
        (n,) = struct.unpack_from("<I", data, off)
        ids = list(struct.unpack_from(f"<{n}I", data, off + 4))
        mask = list(data[off + 4 + 4 * n:off + 4 + 5 * n])
        out.append((ids, mask))
        off += 4 + 5 * n
    return out


def prefix_rule(fast, chat):
    """The prefix rule, from apply_chat_template's renderings: the character spans of each
    assistant turn, then the tokens overlapping them."""
    text = fast.apply_chat_template(chat, tokenize=False)
    spans = []
    for i, m in enumerate(chat):
        if m["role"] == "assistant":
            before = fast.apply_chat_template(chat[:i], tokenize=False, add_generation_prompt=True) if i else ""
            upto = fast.apply_chat_template(chat[:i + 1], tokenize=False)
            spans.append((len(before), len(upto)))
    enc = fast(text, add_special_tokens=False, return_offsets_mapping=True)
    mask = [int(any(e > a and s < b for a, b in spans)) for s, e in enc["offset_mapping"]]
    return enc["input_ids"], mask


def check_templates(spm, tmp):
    tok = make_tokenizer(tmp)
    for name, template in (("chatml", CHATML_MARKED), ("llama3", LLAMA3), ("qwen", QWEN)):
        d = os.path.join(tmp, name)
        fast = save(tok, d, template)
        got = helper(spm, d, "chat", [{"messages": c} for c in CONVERSATIONS])
        for k, chat in enumerate(CONVERSATIONS):
            ids, mask = got[k]
            if name == "chatml":
                want = fast.apply_chat_template(chat, tokenize=True, return_dict=True,
                                                return_assistant_tokens_mask=True)
                want_ids, want_mask = list(want["input_ids"]), list(want["assistant_masks"])
            else:
                want_ids, want_mask = prefix_rule(fast, chat)
                if want_ids != list(fast.apply_chat_template(chat, tokenize=True, return_dict=True)["input_ids"]):
                    fail(f"{name}: the test's own tokenisation is not apply_chat_template's")
            if ids != want_ids:
                fail(f"{name} conversation {k}: ids differ from apply_chat_template's")
            if mask != want_mask:
                fail(f"{name} conversation {k}: mask {mask} differs from {want_mask}")
            trained = fast.decode([t for t, m in zip(ids, mask) if m])
            expected = "".join(m["content"].strip() + END[name] for m in chat if m["role"] == "assistant")
            if trained.replace("\n", "") != expected:
                fail(f"{name} conversation {k}: the trained tokens decode to {trained!r}, not {expected!r}")
        print(f"  {name}: {len(CONVERSATIONS)} conversations, ids and mask as transformers gives them; the trained "
              f"tokens are the assistant's turns")
    return tok


def check_prompt_completion_and_errors(spm, tmp, tok):
    d = os.path.join(tmp, "qwen")
    fast = PreTrainedTokenizerFast.from_pretrained(d)
    docs = [{"prompt": "Translate: cat ->", "completion": " chat"}]
    (ids, mask), = helper(spm, d, "prompt-completion", docs)
    p = fast("Translate: cat ->", add_special_tokens=False)["input_ids"]
    c = fast(" chat", add_special_tokens=False)["input_ids"] + [fast.convert_tokens_to_ids("<|endoftext|>")]
    if ids != p + c or mask != [0] * len(p) + [1] * len(c):
        fail(f"prompt-completion: {ids} {mask}, expected {p + c} with the completion trained")
    (ids2, mask2), = helper(spm, d, "prompt-completion", docs, ["train-on-prompt"])
    if ids2 != ids or set(mask2) != {1}:
        fail("train-on-prompt does not train on every token")
    conv = [{"prompt": CONVERSATIONS[0][:1], "completion": CONVERSATIONS[0][1:]}]
    (ids3, mask3), = helper(spm, d, "prompt-completion", conv)
    if (ids3, mask3) != tuple(prefix_rule(fast, CONVERSATIONS[0])):
        fail("a conversational prompt-completion is not its conversation's chat encoding")
    err = helper(spm, d, "chat", [{"messages": CONVERSATIONS[0]}, {"messages": CONVERSATIONS[0][:1]}], expect=2)
    if "document 1" not in err or "assistant" not in err:
        fail(f"a conversation without an assistant message is not refused by document: {err}")
    bad = os.path.join(tmp, "bad")
    save(tok, bad, "{% for m in messages|reverse %}{{ m['content'] }}{% endfor %}")
    err = helper(spm, bad, "chat", [{"messages": CONVERSATIONS[1]}], expect=2)
    if "document 0" not in err or "generation" not in err:
        fail(f"a template without growing prefixes is not refused: {err}")
    check_message_errors(spm, tmp, tok)
    print("  prompt-completion, train-on-prompt and the refusals: as expected")


def check_message_errors(spm, tmp, tok):
    """Bad message fields, a mistyped role, a broken template and none at all: named, by where."""
    d = os.path.join(tmp, "qwen")
    user = CONVERSATIONS[0][0]
    cases = [([{"messages": [user, {"role": "assistant", "content": 5}]}], ["document 0", "messages[1].content is 5"]),
             ([{"messages": [user, {"role": ["assistant"], "content": "x"}]}], ["messages[1].role is"]),
             ([{"prompt": [user], "completion": [{"role": "assistant", "content": {"a": 1}}]}],
              ["completion[0].content is {", "a list of content parts"]),
             ([{"messages": [user, {"role": "asistant", "content": "Paris."}]}],
              ['(roles seen: "user", "asistant"; "asistant" is none of system, user, assistant, tool)'])]
    for docs, wants in cases:
        err = helper(spm, d, "prompt-completion" if "prompt" in docs[0] else "chat", docs, expect=2)
        if any(w not in err for w in wants) or "Traceback" in err:
            fail(f"{docs}: the error does not say {wants}: {err}")
    parts = [{"type": "text", "text": "What is the capital of France?"}]  # content parts are let through
    helper(spm, d, "chat", [{"messages": [{"role": "user", "content": parts}, CONVERSATIONS[0][1]]}],
           template=write(tmp, "parts.jinja", "{% for m in messages %}{{ m['role'] }}{% endfor %}"))
    broken = write(tmp, "broken.jinja", "{% for m in messages %}\n{{ m['content'] }\n{% endfor %}")
    err = helper(spm, d, "chat", [{"messages": CONVERSATIONS[0]}], template=broken, expect=2)
    if broken + ":2: the chat template does not parse" not in err:
        fail(f"a broken --chat-template file is not named with its line: {err}")
    folder = os.path.join(tmp, "broken-folder")
    save(tok, folder, "{% if %}")
    err = helper(spm, folder, "chat", [{"messages": CONVERSATIONS[0]}], expect=2)
    if folder not in err or "does not parse" not in err:
        fail(f"a broken chat template in the tokenizer folder is not named by its file: {err}")
    folder = os.path.join(tmp, "no-template")
    save(tok, folder, None)
    err = helper(spm, folder, "chat", [{"messages": CONVERSATIONS[0]}], expect=2)
    if f"the tokenizer folder {folder} has none" not in err:
        fail(f"a tokenizer folder without a chat template is not named: {err}")


def write(tmp, name, text):
    path = os.path.join(tmp, name)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    return path


def prepare(frugal, tmp, name, lines, tokenizer_dir, extra=(), expect=0, val="0"):
    src = os.path.join(tmp, name + ".jsonl")
    with open(src, "w", encoding="utf-8") as f:
        f.write("".join(line + "\n" for line in lines))
    out = os.path.join(tmp, name + "-ds")
    p = CHECK.run([frugal, "prepare", src, "--out", out, "--format", "chat", "--tokenizer",
                   "hf:" + os.path.join(tokenizer_dir, "tokenizer.json"), "--val-fraction", val, *extra], expect=expect)
    return out, p.stdout + p.stderr


def inspect(frugal, ds):
    p = CHECK.run([frugal, "inspect", ds, "-n", "100", "--json"])
    return [json.loads(line) for line in p.stdout.splitlines() if line.strip()]


def check_template_edit(frugal, tmp, lines):
    """The cache knows the tokenizer folder's files beside tokenizer.json: after its chat template is
    edited in place (chat_template.jinja, or tokenizer_config.json's chat_template, wherever
    save_pretrained put it), prepare renders again, with the new template."""
    folder = os.path.join(tmp, "edited")
    shutil.copytree(os.path.join(tmp, "chatml"), folder)
    prepare(frugal, tmp, "edited", lines, folder)
    jinja = os.path.join(folder, "chat_template.jinja")
    if os.path.exists(jinja):
        write(folder, "chat_template.jinja", QWEN)
    else:
        config_path = os.path.join(folder, "tokenizer_config.json")
        with open(config_path, encoding="utf-8") as f:
            config = json.load(f)
        config["chat_template"] = QWEN
        write(folder, "tokenizer_config.json", json.dumps(config))
    ds, out = prepare(frugal, tmp, "edited", lines, folder)
    if "up to date" in out:
        fail("an edited chat template in the tokenizer folder left the dataset 'up to date'")
    qwen = PreTrainedTokenizerFast.from_pretrained(os.path.join(tmp, "qwen"))
    for k, (doc, chat) in enumerate(zip(inspect(frugal, ds), CONVERSATIONS)):
        if (doc["tokens"], doc["loss_mask"]) != tuple(prefix_rule(qwen, chat)):
            fail(f"after the template edit, document {k} is not the new (Qwen) template's")


def check_exported_template(frugal, tmp, lines, template):
    """The dataset keeps the template its documents were rendered with (here --chat-template's, not
    the tokenizer folder's ChatML), and `frugal export` of a run on it writes that template as the
    tokenizer's own."""
    ds, _ = prepare(frugal, tmp, "llama-train", lines * 4, os.path.join(tmp, "chatml"), ["--chat-template", template],
                    val="0.25")
    with open(os.path.join(ds, "chat_template.jinja"), encoding="utf-8") as f:
        if f.read() != LLAMA3:
            fail("the dataset does not keep --chat-template's template as chat_template.jinja")
    run_dir = os.path.join(tmp, "runs")
    CHECK.run([frugal, "train", "--quiet", "--set", f"data.source=shards:{ds}", "--set", "model.vocab=400",
               "--set", "model.block=64", "--set", "model.layers=1", "--set", "model.embd=32", "--set",
               "model.heads=2", "--set", "data.micro_batch=2", "--set", "train.steps=2", "--set", "train.eval_batches=1",
               "--set", f"run.out_dir={run_dir}", "--set", "run.name=llama3-template"])
    out = os.path.join(tmp, "llama3-export")
    CHECK.run([frugal, "export", os.path.join(run_dir, "llama3-template"), "--out", out])
    exported = PreTrainedTokenizerFast.from_pretrained(out)
    if exported.chat_template != LLAMA3:
        fail(f"the export's chat template is not the one the documents were rendered with: "
             f"{str(exported.chat_template)[:120]!r}")


def check_prepare(frugal, tmp):
    lines = [json.dumps({"messages": c}, ensure_ascii=False) for c in CONVERSATIONS]
    chatml = PreTrainedTokenizerFast.from_pretrained(os.path.join(tmp, "chatml"))
    ds, _ = prepare(frugal, tmp, "chats", lines[:1] + [""] + lines[1:], os.path.join(tmp, "chatml"))
    docs = inspect(frugal, ds)
    if len(docs) != len(CONVERSATIONS):
        fail(f"prepare stored {len(docs)} documents of {len(CONVERSATIONS)}")
    for k, (doc, chat) in enumerate(zip(docs, CONVERSATIONS)):
        want = chatml.apply_chat_template(chat, tokenize=True, return_dict=True, return_assistant_tokens_mask=True)
        if doc["tokens"] != list(want["input_ids"]) or doc["loss_mask"] != list(want["assistant_masks"]):
            fail(f"prepare's document {k} is not apply_chat_template's ids and assistant mask")
    text = CHECK.run([frugal, "inspect", ds, "-n", "1"]).stdout
    if "⟦Paris. It is also the largest city.<|im_end|>⟧" not in text:
        fail(f"inspect does not mark the trained text: {text}")
    _, again = prepare(frugal, tmp, "chats", lines[:1] + [""] + lines[1:], os.path.join(tmp, "chatml"))
    if "up to date" not in again:
        fail(f"a second prepare with the same inputs did work again: {again}")
    # --tokenizer hf:DIR is the folder's tokenizer.json (as model.init_from = "hf:DIR"): the same dataset.
    p = CHECK.run([frugal, "prepare", os.path.join(tmp, "chats.jsonl"), "--out", ds, "--format", "chat",
                   "--tokenizer", "hf:" + os.path.join(tmp, "chatml"), "--val-fraction", "0"])
    if "up to date" not in p.stdout + p.stderr:
        fail(f"--tokenizer hf:DIR is not the same tokenizer as hf:DIR/tokenizer.json: {p.stdout + p.stderr}")
    check_template_edit(frugal, tmp, lines)
    p = CHECK.run([frugal, "prepare", os.path.join(tmp, "chats.jsonl"), "--out", os.path.join(tmp, "x"), "--format",
                   "chat", "--tokenizer", "hf:" + tmp], expect=2)
    if "hf:" + tmp + ": the folder has no tokenizer.json" not in p.stdout + p.stderr:
        fail(f"--tokenizer hf:DIR of a folder without tokenizer.json is not refused by name: {p.stderr}")
    # --chat-template: the Llama-3 template over the ChatML folder's tokenizer.
    llama3 = PreTrainedTokenizerFast.from_pretrained(os.path.join(tmp, "llama3"))
    template = os.path.join(tmp, "llama3.jinja")
    with open(template, "w") as f:
        f.write(LLAMA3)
    ds, _ = prepare(frugal, tmp, "llama", lines, os.path.join(tmp, "chatml"), ["--chat-template", template])
    for k, (doc, chat) in enumerate(zip(inspect(frugal, ds), CONVERSATIONS)):
        if (doc["tokens"], doc["loss_mask"]) != tuple(prefix_rule(llama3, chat)):
            fail(f"--chat-template: document {k} is not the Llama-3 template's")
    check_exported_template(frugal, tmp, lines, template)
    # --max-tokens: cut, counted; the cut keeps every document's first trained token (a cut before
    # it leaves a document without a target, which prepare refuses: below).
    uncut, _ = prepare(frugal, tmp, "uncut", lines, os.path.join(tmp, "chatml"))
    docs = inspect(frugal, uncut)
    keep = max(d["loss_mask"].index(1, 1) for d in docs) + 2
    if sum(len(d["tokens"]) > keep for d in docs) < 2:
        fail(f"--max-tokens {keep} would cut fewer than 2 of the conversations: the check checks nothing")
    for overflow, want in (("truncate", "truncated"), ("split", "split")):
        ds, _ = prepare(frugal, tmp, "cut-" + overflow, lines, os.path.join(tmp, "chatml"),
                        ["--max-tokens", str(keep), "--overflow", overflow])
        counts = json.load(open(os.path.join(ds, "manifest.json")))["counts"]
        if counts[want] < 2 or any(len(d["tokens"]) > keep for d in inspect(frugal, ds)):
            fail(f"--overflow {overflow}: {counts}")
    # A dataset without a training document is not published: every document cut before its first
    # trained token, or pieces of one token (a document's first token is no target).
    for extra in (["--max-tokens", "2"], ["--max-tokens", "1", "--overflow", "split"]):
        ds, err = prepare(frugal, tmp, "untrainable", lines, os.path.join(tmp, "chatml"), extra, expect=2)
        if "raise --max-tokens" not in err or os.path.exists(ds):
            fail(f"prepare {' '.join(extra)} published a dataset without a training document: {err}")
    # Refusals, by file and line.
    _, err = prepare(frugal, tmp, "bad", [lines[0], "{not json"], os.path.join(tmp, "chatml"), expect=2)
    if "bad.jsonl:2" not in err:
        fail(f"a malformed line is not named by file and line: {err}")
    no_assistant = json.dumps({"messages": CONVERSATIONS[0][:1]})
    _, err = prepare(frugal, tmp, "noasst", [lines[0], lines[1], no_assistant], os.path.join(tmp, "chatml"),
                     expect=2)
    if "noasst.jsonl:3" not in err or "assistant" not in err:
        fail(f"a conversation without an assistant message is not named by file and line: {err}")
    plain = os.path.join(tmp, "plain")
    fast = PreTrainedTokenizerFast(tokenizer_object=chatml.backend_tokenizer, eos_token="<|endoftext|>")
    fast.save_pretrained(plain)
    for f in ("chat_template.jinja",):
        if os.path.exists(os.path.join(plain, f)):
            os.remove(os.path.join(plain, f))
    _, err = prepare(frugal, tmp, "notemplate", lines, plain, expect=2)
    if "--chat-template" not in err:
        fail(f"a tokenizer without a chat template is not refused with the way out: {err}")
    p = CHECK.run([frugal, "prepare", os.path.join(tmp, "chats.jsonl"), "--out", os.path.join(tmp, "x"),
                   "--format", "chat"], expect=2)
    if "hf:" not in p.stdout + p.stderr:
        fail(f"--format chat with the byte tokenizer is not refused naming --tokenizer hf: {p.stderr}")
    # A short run on it: one document a row, the loss over the trained-on tokens.
    ds, _ = prepare(frugal, tmp, "train", lines * 4, os.path.join(tmp, "chatml"), val="0.25")
    run_dir = os.path.join(tmp, "runs")
    CHECK.run([frugal, "train", "--quiet", "--set", f"data.source=shards:{ds}", "--set", "model.vocab=400",
               "--set", "model.block=64", "--set", "model.layers=1", "--set", "model.embd=32", "--set",
               "model.heads=2", "--set", "data.micro_batch=3", "--set", "train.steps=4", "--set",
               "train.eval_batches=1", "--set", f"run.out_dir={run_dir}", "--set", "run.name=chat"])
    summary = json.load(open(os.path.join(run_dir, "chat", "summary.json")))
    if not summary["final_val_loss"] > 0 or "chat documents" not in json.dumps(summary):
        fail(f"the run on chat documents did not end with a validation loss: {summary.get('final_val_loss')}")
    # model.block = 4 keeps no document's first trained token: refused, not a run of loss 0.
    p = CHECK.run([frugal, "train", "--quiet", "--set", f"data.source=shards:{ds}", "--set", "model.vocab=400",
                   "--set", "model.block=4", "--set", "train.steps=2", "--set", f"run.out_dir={run_dir}",
                   "--set", "run.name=cut"], expect=2)
    if "has a trained token within model.block = 4" not in p.stdout + p.stderr:
        fail(f"a block that cuts every trained token is not refused by name: {(p.stdout + p.stderr)[-500:]}")
    p = CHECK.run([frugal, "train", "--quiet", "--set", f"data.source=records:{ds}", "--set", "train.steps=1",
                   "--set", f"run.out_dir={run_dir}"], expect=2)
    if "documents dataset" not in p.stdout + p.stderr:
        fail(f"records:DIR on a documents dataset is not refused by name: {p.stderr[-500:]}")
    print("  frugal prepare --format chat / inspect: apply_chat_template's ids and masks, in order; --chat-template, "
          "--max-tokens and the refusals as expected")


def main():
    if len(sys.argv) != 3:
        print(__doc__)
        sys.exit(2)
    frugal, spm = sys.argv[1], sys.argv[2]
    with tempfile.TemporaryDirectory(prefix="frugal-chat-") as tmp:
        tok = check_templates(spm, tmp)
        check_prompt_completion_and_errors(spm, tmp, tok)
        check_prepare(frugal, tmp)
    print("chat_template_check: OK")


if __name__ == "__main__":
    main()
