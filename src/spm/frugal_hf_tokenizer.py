#!/usr/bin/env python3
"""frugal's helper for Hugging Face tokenizers (a tokenizer.json), run by frugal as a separate
process with the Python that has the `tokenizers` package (FRUGAL_PYTHON, else the build's),
the way frugal-spm runs SentencePiece: the tokenizer is the reference library itself, not a copy.

  frugal_hf_tokenizer.py info   TOKENIZER_JSON            -> "vocab N separator ID..." (the
                                                          end-of-text token, else the ids of
                                                          a blank line)
  frugal_hf_tokenizer.py encode TOKENIZER_JSON IN OUT     IN: per document u64 length + UTF-8
                                                          bytes; OUT: per document u32 count +
                                                          u32 ids (little-endian), no special
                                                          tokens added
  frugal_hf_tokenizer.py decode TOKENIZER_JSON IN OUT     IN: u32 ids; OUT: the text (UTF-8)
  frugal_hf_tokenizer.py decode-many TOKENIZER_JSON IN OUT
                                                          IN: per piece u32 count + u32 ids; OUT:
                                                          per piece u64 length + its text
  frugal_hf_tokenizer.py meta   META_PKL                  -> "vocab N": a nanoGPT dataset's
                                                          meta.pkl vocab_size (read without
                                                          running any code the file names)
  frugal_hf_tokenizer.py chat   TOKENIZER_JSON TEMPLATE KIND IN OUT
                                                          IN: per document u64 length + one JSON
                                                          object (a jsonl line); KIND "chat"
                                                          ({"messages": [...]}) or
                                                          "prompt-completion"; TEMPLATE a Jinja
                                                          file, or "-" for the tokenizer's own;
                                                          OUT: per document u32 count + u32 ids +
                                                          count u8 loss mask (1 = trained on)
                                                          (frugal_chat.py: how)

Exits 3 with a one-line message on stderr when `tokenizers` is missing, 2 on bad input.
"""
import pickle
import struct
import sys

# Tokens that end a document in the tokenizers people ship, first match wins: GPT-2's, Llama's and
# T5's, and others'.
EOS_NAMES = ["<|endoftext|>", "</s>", "<|end_of_text|>", "<eos>", "<|eot_id|>", "[SEP]"]


def load(path):
    try:
        from tokenizers import Tokenizer
    except ImportError:
        print(f"the Python package 'tokenizers' is not installed in {sys.executable} (pip install tokenizers; "
              "scripts/install-deps.sh installs it into .venv; FRUGAL_PYTHON names another Python)", file=sys.stderr)
        sys.exit(3)
    try:
        return Tokenizer.from_file(path)
    except Exception as e:  # the library's own message names what is wrong with the file
        print(f"{path}: not a tokenizer.json the tokenizers library can load: {e}", file=sys.stderr)
        sys.exit(2)


def separator(tok):
    """What frugal puts after every document: the end-of-text token, else the ids of a blank line."""
    for name in EOS_NAMES:
        i = tok.token_to_id(name)
        if i is not None:
            return [i]
    return tok.encode("\n\n", add_special_tokens=False).ids


def read_docs(path):
    """The documents, decoded as UTF-8: a bad byte is an error naming the document and the byte, never
    a U+FFFD put in its place unseen."""
    data = open(path, "rb").read()
    docs, off = [], 0
    while off < len(data):
        (n,) = struct.unpack_from("<Q", data, off)
        off += 8
        try:
            docs.append(data[off:off + n].decode("utf-8"))
        except UnicodeDecodeError as e:
            print(f"document {len(docs)}: invalid UTF-8 at byte {e.start} of the document ({e.reason}); the tokenizer "
                  "reads UTF-8 text: convert the input, e.g. iconv -f latin1 -t utf-8 when it is Latin-1",
                  file=sys.stderr)
            sys.exit(2)
        off += n
    return docs


class PlainUnpickler(pickle.Unpickler):
    """Builds dicts, lists, strings and numbers only: a pickle that names a class or function (code
    that unpickling would run) is refused."""

    def find_class(self, module, name):
        raise pickle.UnpicklingError(f"it names {module}.{name}; frugal reads plain data only")


def meta_vocab(path):
    try:
        with open(path, "rb") as f:
            meta = PlainUnpickler(f).load()
        vocab = meta["vocab_size"]
        if not isinstance(vocab, int) or vocab < 2:
            raise ValueError(f"vocab_size is {vocab!r}")
    except Exception as e:
        print(f"{path}: not a nanoGPT meta.pkl with an integer vocab_size: {e}", file=sys.stderr)
        sys.exit(2)
    print(f"vocab {vocab}")
    return 0


def main(argv):
    if len(argv) < 2 or argv[0] not in ("info", "encode", "decode", "decode-many", "meta", "chat"):
        print(__doc__, file=sys.stderr)
        return 2
    if argv[0] == "meta":
        return meta_vocab(argv[1])
    if argv[0] == "chat":
        import frugal_chat
        return frugal_chat.main(argv[1:], load, separator, read_docs)
    tok = load(argv[1])
    if argv[0] == "info":
        print(f"vocab {tok.get_vocab_size(with_added_tokens=True)} separator {' '.join(map(str, separator(tok)))}")
        return 0
    if len(argv) != 4:
        print(__doc__, file=sys.stderr)
        return 2
    if argv[0] == "encode":
        docs = read_docs(argv[2])
        with open(argv[3], "wb") as out:
            for enc in tok.encode_batch(docs, add_special_tokens=False):
                out.write(struct.pack(f"<I{len(enc.ids)}I", len(enc.ids), *enc.ids))
        return 0
    data = open(argv[2], "rb").read()
    if argv[0] == "decode-many":
        with open(argv[3], "wb") as out:
            off = 0
            while off < len(data):
                (n,) = struct.unpack_from("<I", data, off)
                text = tok.decode(list(struct.unpack_from(f"<{n}I", data, off + 4)), skip_special_tokens=False)
                b = text.encode("utf-8")
                out.write(struct.pack("<Q", len(b)) + b)
                off += 4 + 4 * n
        return 0
    ids = list(struct.unpack(f"<{len(data) // 4}I", data))
    with open(argv[3], "wb") as out:
        out.write(tok.decode(ids, skip_special_tokens=False).encode("utf-8"))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
