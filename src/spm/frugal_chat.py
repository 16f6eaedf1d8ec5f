"""Chat and prompt-completion documents into token ids and a loss mask, for `frugal prepare --format
chat | prompt-completion` (docs/data.md), run by frugal_hf_tokenizer.py's `chat` command.

The chat template is rendered as transformers' apply_chat_template renders it: Jinja2's sandboxed
environment with trim_blocks and lstrip_blocks, loop controls, its tojson, raise_exception,
strftime_now, dict and namespace, the `{% generation %}` tag, the tokenizer's special tokens as
variables; the text is tokenised without special tokens added. The loss mask:
- a template with `{% generation %}` blocks: 1 on every token that overlaps a block's text
  (apply_chat_template's return_assistant_tokens_mask, the same rule);
- a template without: 1 on the tokens of each assistant message's own text, found by the prefix rule:
  the conversation up to the message with the generation prompt, then up to and including the
  message, are prefixes of the whole rendering; the tokens between the two (the content and the
  template's end-of-turn token after it) are trained on. A template that does not render a growing
  prefix is refused (use one with {% generation %} blocks);
- prompt-completion without messages: the prompt's tokens then the completion's and the end-of-text
  token; 1 on the completion and the end token.
With train_on_prompt every token is trained on. Errors exit 2 naming the document (0-based) and
what is wrong.
"""
import json
import os
import struct
import sys


def fail(msg):
    print(msg, file=sys.stderr)
    sys.exit(2)


def environment():
    try:
        import jinja2
        from jinja2.ext import Extension
        from jinja2.sandbox import ImmutableSandboxedEnvironment
    except ImportError:
        print(f"the Python package 'jinja2' is not installed in {sys.executable} (pip install jinja2; "
              "scripts/install-deps.sh installs it into .venv)", file=sys.stderr)
        sys.exit(3)
    from datetime import datetime

    class GenerationTracker(Extension):
        """transformers' AssistantTracker: the character span each {% generation %} block renders, at
        the length of what the template has yielded so far."""
        tags = {"generation"}
        state = None  # (pieces yielded so far, spans) around one rendering

        def parse(self, parser):
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
            return jinja2.nodes.CallBlock(self.call_method("_generation"), [], [], body).set_lineno(lineno)

        def _generation(self, caller):
            rv = caller()
            if GenerationTracker.state is not None:
                pieces, spans = GenerationTracker.state
                start = len("".join(pieces))
                spans.append((start, start + len(rv)))
            return rv

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    class TemplateDict:
        def __call__(self, *args, **kwargs):
            return dict(*args, **kwargs)

        def fromkeys(self, *args, **kwargs):
            return dict.fromkeys(*args, **kwargs)

    class TemplateNamespace(jinja2.utils.Namespace):
        def __init__(*args, **kwargs):
            self, args = args[0], args[1:]
            attrs = dict(*args, **kwargs)
            for name in attrs:
                TemplateNamespace._check(name)
            jinja2.utils.Namespace.__init__(self, attrs)

        def __setitem__(self, name, value):
            TemplateNamespace._check(name)
            jinja2.utils.Namespace.__setitem__(self, name, value)

        @staticmethod
        def _check(name):
            if isinstance(name, str) and name.startswith("_"):
                raise jinja2.exceptions.SecurityError(f"a namespace attribute may not start with '_': {name!r}")

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[GenerationTracker, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    env.globals["dict"] = TemplateDict()
    env.globals["namespace"] = TemplateNamespace
    return env, GenerationTracker


def special_tokens(config):
    """The special tokens transformers passes to a template (special_tokens_map), as strings."""
    out = {}
    for key in ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"):
        v = config.get(key)
        if isinstance(v, dict):
            v = v.get("content")
        if isinstance(v, str):
            out[key] = v
    extra = config.get("additional_special_tokens")
    if isinstance(extra, list):
        out["additional_special_tokens"] = [t.get("content") if isinstance(t, dict) else t for t in extra]
    return out


REASONING_FIELDS = ("reasoning_content", "thinking", "reasoning")


def alias_reasoning(messages):
    """transformers' _alias_reasoning_fields: a message's reasoning under every name templates read."""
    out = []
    for m in messages:
        reasoning = next((m[k] for k in REASONING_FIELDS if m.get(k) is not None), None)
        if reasoning is not None:
            m = {"thinking": reasoning, **m, "reasoning_content": reasoning}
        out.append(m)
    return out


class Renderer:
    def __init__(self, template, config, origin):
        """origin: (path, in_config) of the template, as load_template gives it."""
        import re
        self.env, self.tracker = environment()
        try:
            self.template = self.env.from_string(template)
        except Exception as e:
            path, in_config = origin
            line = getattr(e, "lineno", None)
            where = (f"{path}: its chat_template" + (f" (line {line} of the template)" if line else "")
                     if in_config else f"{path}:{line}: the chat template" if line else f"{path}: the chat template")
            fail(f"{where} does not parse: {e}; fix it, or give another with --chat-template FILE")
        self.marked = re.search(r"\{\%-?\s*generation\s*-?\%\}", template) is not None
        self.variables = special_tokens(config)

    def render(self, messages, add_generation_prompt):
        return self.template.render(messages=messages, tools=None, documents=None,
                                    add_generation_prompt=add_generation_prompt, **self.variables)

    def render_tracked(self, messages):
        """The whole rendering and the character spans of its {% generation %} blocks, as
        render_jinja_template finds them."""
        pieces, spans = [], []
        self.tracker.state = (pieces, spans)
        try:
            for piece in self.template.generate(messages=messages, tools=None, documents=None,
                                                add_generation_prompt=False, **self.variables):
                pieces.append(piece)
        finally:
            self.tracker.state = None
        return "".join(pieces), spans


def prefix_spans(renderer, messages):
    """The whole rendering and, for each assistant message, the characters the prefix rule gives it."""
    text = renderer.render(messages, False)
    spans = []
    for i, m in enumerate(messages):
        if m.get("role") != "assistant":
            continue
        before = renderer.render(messages[:i], True)
        upto = renderer.render(messages[:i + 1], False)
        if not (text.startswith(upto) and upto.startswith(before)):
            raise ValueError(f"the chat template does not render messages[:{i}] (with the generation prompt) and "
                             f"messages[:{i + 1}] as prefixes of the whole conversation, so the assistant's tokens "
                             "cannot be told apart: give a template with {% generation %} blocks (--chat-template)")
        spans.append((len(before), len(upto)))
    return text, spans


def mask_of(offsets, spans):
    """apply_chat_template's rule: 1 on every token overlapping a span (both in order)."""
    mask = [0] * len(offsets)
    k = 0
    for t, (start, end) in enumerate(offsets):
        while k < len(spans) and start >= spans[k][1]:
            k += 1
        if k == len(spans):
            break
        if end > spans[k][0]:
            mask[t] = 1
    return mask


ROLES = ("system", "user", "assistant", "tool")  # the usual ones; a template may take others


def shown(value):
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= 40 else text[:37] + "..."


def check_messages(named):
    """The messages of [(field, list)], checked field by field before any rendering: each an object
    whose "role" is a string and whose "content" is a string, a list of content parts (as
    transformers takes them) or null; one of them the assistant's."""
    messages = []
    for field, items in named:
        if not isinstance(items, list):
            raise ValueError(f'"{field}" must be a list of {{"role": ..., "content": ...}} objects')
        for i, m in enumerate(items):
            if not isinstance(m, dict) or "role" not in m or "content" not in m:
                raise ValueError(f'{field}[{i}] is not an object with a "role" and a "content"')
            if not isinstance(m["role"], str):
                raise ValueError(f"{field}[{i}].role is {shown(m['role'])}: it must be a string "
                                 f"({', '.join(ROLES)})")
            if m["content"] is not None and not isinstance(m["content"], (str, list)):
                raise ValueError(f"{field}[{i}].content is {shown(m['content'])}: it must be a string (or a list "
                                 'of content parts, {"type": "text", "text": ...})')
        messages += items
    if not messages:
        raise ValueError(f'"{named[0][0]}" must be a non-empty list of {{"role": ..., "content": ...}} objects')
    if not any(m["role"] == "assistant" for m in messages):
        seen = list(dict.fromkeys(m["role"] for m in messages))
        odd = [r for r in seen if r not in ROLES]
        also = (f"; {', '.join(map(shown, odd))} {'is' if len(odd) == 1 else 'are'} none of {', '.join(ROLES)}"
                if odd else "")
        raise ValueError(f'no message has the role "assistant" (roles seen: {", ".join(map(shown, seen))}{also}): '
                         "there is nothing to train on")
    return messages


def encode_document(tok, renderer, sep, kind, doc, train_on_prompt, folder):
    if kind == "prompt-completion" and not isinstance(doc.get("prompt"), list):
        prompt, completion = doc.get("prompt"), doc.get("completion")
        for field, value in (("prompt", prompt), ("completion", completion)):
            if not isinstance(value, str):
                raise ValueError(f'"{field}" is {"missing" if field not in doc else shown(value)}: expected a string '
                                 '(or "prompt" and "completion" lists of messages)')
        p = tok.encode(prompt, add_special_tokens=False).ids
        c = tok.encode(completion, add_special_tokens=False).ids + sep
        return p + c, [1 if train_on_prompt else 0] * len(p) + [1] * len(c)
    if kind == "prompt-completion":
        messages = check_messages([("prompt", doc["prompt"]), ("completion", doc.get("completion") or [])])
    else:
        messages = check_messages([("messages", doc.get("messages"))])
    messages = alias_reasoning([{k: v for k, v in m.items() if v is not None} for m in messages])
    if renderer is None:
        raise ValueError(f"no chat template: the tokenizer folder {folder} has none (tokenizer_config.json's "
                         "chat_template or chat_template.jinja); give one with --chat-template FILE")
    text, spans = renderer.render_tracked(messages) if renderer.marked else prefix_spans(renderer, messages)
    enc = tok.encode(text, add_special_tokens=False)
    mask = [1] * len(enc.ids) if train_on_prompt else mask_of(enc.offsets, spans)
    return enc.ids, mask


def load_template(folder, template_path):
    """The template, tokenizer_config.json and where the template is: (path, in tokenizer_config.json)."""
    config = {}
    cfg_path = os.path.join(folder, "tokenizer_config.json")
    if os.path.isfile(cfg_path):
        with open(cfg_path, encoding="utf-8") as f:
            config = json.load(f)
    if template_path != "-":
        with open(template_path, encoding="utf-8") as f:
            return f.read(), config, (template_path, False)
    jinja_path = os.path.join(folder, "chat_template.jinja")
    if os.path.isfile(jinja_path):
        with open(jinja_path, encoding="utf-8") as f:
            return f.read(), config, (jinja_path, False)
    t = config.get("chat_template")
    if isinstance(t, list):  # named templates: the "default" one
        t = next((x.get("template") for x in t if x.get("name") == "default"), None)
    return t, config, (cfg_path, True)


def main(argv, load, separator, read_docs):
    if len(argv) not in (5, 6):
        fail("usage: frugal_hf_tokenizer.py chat TOKENIZER_JSON TEMPLATE|- chat|prompt-completion IN OUT "
             "[train-on-prompt]")
    tokenizer_json, template_path, kind, src, dst = argv[:5]
    train_on_prompt = len(argv) == 6 and argv[5] == "train-on-prompt"
    tok = load(tokenizer_json)
    folder = os.path.dirname(os.path.abspath(tokenizer_json))
    template, config, origin = load_template(folder, template_path)
    renderer = Renderer(template, config, origin) if template else None
    sep = separator(tok)
    rendered = False
    with open(dst, "wb") as out:
        for i, line in enumerate(read_docs(src)):
            try:
                doc = json.loads(line)
                if not isinstance(doc, dict):
                    raise ValueError(f"{shown(doc)} is not a JSON object")
                rendered = rendered or kind == "chat" or isinstance(doc.get("prompt"), list)
                ids, mask = encode_document(tok, renderer, sep, kind, doc, train_on_prompt, folder)
            except Exception as e:  # the document is named by the caller (file and line)
                fail(f"document {i}: {type(e).__name__ + ': ' if not isinstance(e, ValueError) else ''}{e}")
            out.write(struct.pack(f"<I{len(ids)}I", len(ids), *ids))
            out.write(bytes(mask))
    if rendered and template:  # the template the documents were rendered with, kept with the dataset
        with open(dst + ".template", "w", encoding="utf-8") as f:
            f.write(template)
    return 0
