// `frugal inspect DIR [-n N] [--split S] [--json]`: the documents of a chat or prompt-completion
// dataset as the model will see them (docs/data.md).
#include <fmt/format.h>

#include <algorithm>
#include <memory>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "frugal/data/document_dataset.h"

namespace frugal::cli {

namespace {
struct InspectArgs {
  std::string dir, split = "train";
  int64_t n = 5;
  bool json = false;
};

// The runs of equal mask values of `d`: [begin, end) and whether they are trained on.
struct Span {
  size_t begin, end;
  bool trained;
};
std::vector<Span> spans_of(const MaskedDocument& d) {
  std::vector<Span> out;
  for (size_t i = 0; i < d.ids.size(); ++i)
    if (out.empty() || out.back().trained != (d.mask[i] != 0))
      out.push_back({i, i + 1, d.mask[i] != 0});
    else
      out.back().end = i + 1;
  return out;
}

int inspect(const InspectArgs& a) {
  const DocumentDataset ds(a.dir);
  const int64_t n = std::min(a.n, ds.size(a.split));
  std::vector<MaskedDocument> docs;
  std::vector<std::vector<int32_t>> pieces;  // per document: its whole ids, then each run's
  for (int64_t i = 0; i < n; ++i) {
    docs.push_back(ds.document(a.split, i));
    pieces.push_back(docs.back().ids);
    for (const Span& r : spans_of(docs.back()))
      pieces.emplace_back(docs.back().ids.begin() + static_cast<ptrdiff_t>(r.begin),
                          docs.back().ids.begin() + static_cast<ptrdiff_t>(r.end));
  }
  const std::vector<std::string> texts = decode_pieces(ds.tokenizer_json(), pieces);
  if (!a.json)
    fmt::print(
        "{}: {} documents, {} train / {} val, vocab {}; the first {} of {}, the trained-on text between ⟦ and "
        "⟧\n",
        a.dir, ds.content(), ds.size("train"), ds.size("val"), ds.vocab(), n, a.split);
  size_t t = 0;
  for (int64_t i = 0; i < n; ++i) {
    const MaskedDocument& d = docs[static_cast<size_t>(i)];
    const std::string whole = texts[t++];
    const auto trained = std::count(d.mask.begin(), d.mask.end(), uint8_t{1});
    std::string marked;
    nlohmann::json spans = nlohmann::json::array();
    for (const Span& r : spans_of(d)) {
      const std::string& s = texts[t++];
      marked += r.trained ? "⟦" + s + "⟧" : s;
      if (r.trained) spans.push_back(s);
    }
    if (a.json) {
      nlohmann::json j = {{"split", a.split},    {"index", i},    {"tokens", d.ids},
                          {"loss_mask", d.mask}, {"text", whole}, {"trained", spans}};
      fmt::print("{}\n", j.dump());
    } else {
      fmt::print("\n── {} {}: {} tokens, {} trained on\n{}\n", a.split, i, d.ids.size(), trained, marked);
    }
  }
  return 0;
}
}  // namespace

void add_inspect_command(CLI::App& app, Run* run) {
  auto a = std::make_shared<InspectArgs>();
  auto* cmd = app.add_subcommand("inspect",
                                 "Show the documents of a chat or prompt-completion dataset (frugal prepare --format "
                                 "chat | prompt-completion) as the model will see them: the tokens decoded, with the "
                                 "ones the loss trains on marked. docs/data.md.");
  cmd->add_option("dir", a->dir, "the dataset folder")->required()->check(CLI::ExistingDirectory);
  cmd->add_option("-n", a->n, "how many documents, from the first")
      ->check(in_range(int64_t{0}, int64_t{1} << 40))
      ->capture_default_str();
  cmd->add_option("--split", a->split, "train or val")->check(CLI::IsMember({"train", "val"}))->capture_default_str();
  cmd->add_flag("--json", a->json,
                "one JSON object per document, in stored order: split, index, tokens, loss_mask (1 = trained on), "
                "text (all tokens decoded) and trained (the decoded runs of trained-on tokens)");
  cmd->callback([a, run] { *run = [a] { return inspect(*a); }; });
}

}  // namespace frugal::cli
