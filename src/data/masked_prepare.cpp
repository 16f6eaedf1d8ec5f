// `frugal prepare --format chat | prompt-completion`: jsonl documents rendered with a chat template
// and tokenised by a Hugging Face tokenizer (data/tokenizer.h, src/spm/frugal_chat.py), stored one
// document a record with its loss mask (docs/data.md, docs/formats/shards.md).
#include <algorithm>
#include <filesystem>
#include <regex>

#include <fmt/format.h>

#include "data/internal/jsonl_line.h"
#include "data/internal/little_endian.h"
#include "data/internal/record_prepare.h"
#include "frugal/core/atomic_file.h"
#include "frugal/core/errors.h"
#include "frugal/data/file_hash.h"
#include "frugal/data/tokenizer.h"

namespace frugal::detail {
namespace fs = std::filesystem;

namespace {

// Where a document came from, for messages: "FILE:LINE".
struct Origin {
  std::string file;
  int64_t line = 0;
};

// A document's fields, checked by type before any rendering: {"messages": [...]} for chat;
// {"prompt": "...", "completion": "..."}, or a list of messages as the prompt (and the completion,
// which may then be left out), for prompt-completion.
void check_fields(const nlohmann::json& j, bool completion, const std::string& file, int64_t line) {
  const auto refuse = [&](const std::string& key, const std::string& found, const std::string& expected) {
    throw DataError(fmt::format("{}:{}: \"{}\" is {}, expected {}", file, line, key, found, expected));
  };
  const auto kind = [&](const std::string& key) {
    return j.contains(key) ? json_kind(j[key]) : fmt::format("missing (the line's fields: {})", json_fields(j));
  };
  const std::string messages = "a list of {\"role\": ..., \"content\": ...} messages";
  if (!completion) {
    if (!j.contains("messages") || !j["messages"].is_array()) refuse("messages", kind("messages"), messages);
    return;
  }
  const bool listed = j.contains("prompt") && j["prompt"].is_array();
  if (!listed && !(j.contains("prompt") && j["prompt"].is_string()))
    refuse("prompt", kind("prompt"), "a string (or " + messages + ")");
  const bool none = !j.contains("completion") || j["completion"].is_null();
  if (!listed && !(j.contains("completion") && j["completion"].is_string()))
    refuse("completion", kind("completion"), "a string, as \"prompt\" is one");
  if (listed && !none && !j["completion"].is_array())
    refuse("completion", kind("completion"), messages + ", as \"prompt\" is one (or no \"completion\")");
}

// Every non-blank line of the jsonl files, checked to be a JSON object with the fields of its format.
void read_lines(const std::vector<std::string>& files, bool completion, std::vector<std::string>* docs,
                std::vector<Origin>* origins) {
  const std::string expected = completion ? "{\"prompt\": ..., \"completion\": ...}, a prompt-completion document"
                                          : "{\"messages\": [...]}, a chat document";
  for (const std::string& f : files) {
    const std::string text = read_file(f);
    int64_t line = 0;
    for (size_t at = 0; at < text.size();) {
      const size_t end = std::min(text.find('\n', at), text.size());
      ++line;
      const std::string_view l(text.data() + at, end - at);
      const size_t offset = at;
      at = end + 1;
      if (l.find_first_not_of(" \t\r") == std::string::npos) continue;
      check_fields(parse_jsonl_object(l, f, line, offset, expected), completion, f, line);
      docs->emplace_back(l);
      origins->push_back({f, line});
    }
  }
  if (docs->empty()) throw DataError("prepare: the inputs hold no documents (every line is blank)");
}

// The helper's "document K: what" as "FILE:LINE: what".
[[noreturn]] void rethrow_with_origin(const DataError& e, const std::vector<Origin>& origins) {
  static const std::regex doc_re("document ([0-9]+): ");
  std::smatch m;
  const std::string what = e.what();
  if (std::regex_search(what, m, doc_re)) {
    const size_t k = std::stoul(m[1].str());
    if (k < origins.size())
      throw DataError(
          fmt::format("{}:{}: {}", origins[k].file, origins[k].line, what.substr(m.position(0) + m.length(0))));
  }
  throw e;
}

// Documents over --max-tokens cut as --overflow says; those left with no token to train on dropped.
// A document's first token is never a target (no token before it predicts it), so a document (or
// piece) whose only trained token is its first trains nothing either.
std::vector<MaskedDocument> fit(std::vector<MaskedDocument> docs, const PrepareOptions& o, PrepareReport* r) {
  std::vector<MaskedDocument> out;
  auto keep = [&](MaskedDocument d) {
    if (d.mask.size() < 2 || std::find(d.mask.begin() + 1, d.mask.end(), 1) == d.mask.end()) {
      ++r->dropped_documents;
      return;
    }
    out.push_back(std::move(d));
  };
  const auto limit = static_cast<size_t>(o.max_tokens);
  for (MaskedDocument& d : docs) {
    if (o.max_tokens <= 0 || d.ids.size() <= limit) {
      keep(std::move(d));
    } else if (o.overflow == "split") {
      ++r->split_documents;
      for (size_t at = 0; at < d.ids.size(); at += limit) {
        const size_t n = std::min(limit, d.ids.size() - at);
        keep({{d.ids.begin() + static_cast<ptrdiff_t>(at), d.ids.begin() + static_cast<ptrdiff_t>(at + n)},
              {d.mask.begin() + static_cast<ptrdiff_t>(at), d.mask.begin() + static_cast<ptrdiff_t>(at + n)}});
      }
    } else {
      ++r->truncated_documents;
      d.ids.resize(limit);
      d.mask.resize(limit);
      keep(std::move(d));
    }
  }
  return out;
}

std::string document_record(const MaskedDocument& d) {
  std::string rec(4 + 5 * d.ids.size(), '\0');
  auto* p = reinterpret_cast<uint8_t*>(rec.data());
  put_u32(p, static_cast<uint32_t>(d.ids.size()));
  for (size_t k = 0; k < d.ids.size(); ++k) put_u32(p + 4 + 4 * k, static_cast<uint32_t>(d.ids[k]));
  std::copy(d.mask.begin(), d.mask.end(), p + 4 + 4 * d.ids.size());
  return rec;
}

}  // namespace

void prepare_masked_documents(const PrepareOptions& o, const std::vector<std::string>& files, const std::string& tmp,
                              nlohmann::ordered_json* m, PrepareReport* r, const PrepareProgress& say) {
  const bool completion = o.format == InputFormat::kPromptCompletion;
  const std::string content = completion ? "prompt-completion" : "chat";
  const std::string tokenizer = o.tokenizer.rfind("hf:", 0) == 0 ? o.tokenizer.substr(3) : "";
  if (tokenizer.empty())
    throw ConfigError(
        fmt::format("prepare --format {} needs a Hugging Face tokenizer (--tokenizer "
                    "hf:DIR/tokenizer.json, whose folder holds the chat template), not --tokenizer {}",
                    content, o.tokenizer));
  std::vector<std::string> docs;
  std::vector<Origin> origins;
  read_lines(files, completion, &docs, &origins);
  r->documents_in = static_cast<int64_t>(docs.size());
  say(fmt::format("read {} documents; rendering and tokenising", docs.size()));
  std::vector<MaskedDocument> encoded;
  std::string template_used;
  try {
    encoded =
        encode_masked_documents(tokenizer, o.chat_template, completion, o.train_on_prompt, docs, tmp, &template_used);
  } catch (const DataError& e) {
    rethrow_with_origin(e, origins);
  }
  const auto tok = load_hf_tokenizer(tokenizer);
  r->tokenizer = "hf";
  r->vocab = tok->vocab();
  encoded = fit(std::move(encoded), o, r);
  const std::vector<bool> val = held_out(static_cast<int64_t>(encoded.size()), o.val_fraction, o.seed);
  SplitWriter train(tmp, "train", o, r), valw(tmp, "val", o, r);
  for (size_t i = 0; i < encoded.size(); ++i) {
    const MaskedDocument& d = encoded[i];
    (val[i] ? valw : train).add(document_record(d));
    const auto targets = static_cast<int64_t>(std::count(d.mask.begin(), d.mask.end(), 1));
    const auto n = static_cast<int64_t>(d.ids.size());
    r->tokens += n;
    r->target_tokens += targets;
    (val[i] ? r->val_tokens : r->train_tokens) += n;
  }
  r->documents = static_cast<int64_t>(encoded.size());
  r->kind = "documents";
  r->record_content = content;
  fs::copy_file(tokenizer, tmp + "/tokenizer.json");
  (*m)["kind"] = "documents";
  (*m)["content"] = content;
  (*m)["record"] = "u32 n, n x u32 token ids, n x u8 loss mask (1 = trained on)";
  (*m)["tokenizer"] = {{"name", "hf"},
                       {"vocab", r->vocab},
                       {"model", {{"file", "tokenizer.json"}, {"xxh64", hex64(xxh64_file(tmp + "/tokenizer.json"))}}}};
  if (!template_used.empty()) {  // kept: `frugal export` writes it beside the model trained on these renderings
    write_file_atomic(tmp + "/chat_template.jinja", template_used);
    (*m)["tokenizer"]["chat_template"] = {{"file", "chat_template.jinja"},
                                          {"xxh64", hex64(xxh64_bytes(template_used))}};
  }
  (*m)["chat_template"] = o.chat_template.empty() ? nlohmann::json("the tokenizer's")
                                                  : nlohmann::json(fs::path(o.chat_template).filename().string());
  (*m)["splits"]["train"] = train.finish();
  (*m)["splits"]["val"] = valw.finish();
  r->train_records = train.records();
  r->val_records = valw.records();
  (*m)["counts"] = {{"documents", r->documents},
                    {"train_documents", r->train_records},
                    {"val_documents", r->val_records},
                    {"tokens", r->tokens},
                    {"train_tokens", r->train_tokens},
                    {"val_tokens", r->val_tokens},
                    {"target_tokens", r->target_tokens},
                    {"truncated", r->truncated_documents},
                    {"split", r->split_documents},
                    {"dropped_without_targets", r->dropped_documents},
                    {"bytes_in", r->bytes_in}};
}

}  // namespace frugal::detail
