// format_report: `frugal prepare`'s closing report (see prepare.h); check_splits: the splits against
// what frugal train needs, before the dataset is published (data/internal/record_prepare.h).
#include <fmt/format.h>

#include <algorithm>

#include "data/internal/record_prepare.h"
#include "frugal/core/console.h"
#include "frugal/core/errors.h"
#include "frugal/data/prepare.h"

namespace frugal {
namespace {

std::string report_text(const PrepareReport& r) {
  if (r.kind == "documents") {
    const std::string counts = fmt::format(
        "  documents   {} ({} train / {} val) of {} read; {} truncated, {} split at --max-tokens, {} dropped with no "
        "token to train on\n  tokens      {} ({} train / {} val), {} trained on ({:.1f}%), tokenizer {} (vocab {})",
        r.documents, r.train_records, r.val_records, r.documents_in, r.truncated_documents, r.split_documents,
        r.dropped_documents, r.tokens, r.train_tokens, r.val_tokens, r.target_tokens,
        100.0 * static_cast<double>(r.target_tokens) / static_cast<double>(std::max<int64_t>(r.tokens, 1)), r.tokenizer,
        r.vocab);
    if (r.up_to_date)
      return fmt::format(
          "{} is up to date: same options, and all {} inputs hash as before; nothing to do ({:.2f} s). "
          "Pass --force to rebuild.",
          r.out_dir, r.sources, r.seconds);
    return fmt::format(
        "prepared {} in {:.2f} s ({} documents)\n  inputs      {} files, {:.2f} MB\n{}\n"
        "  output      {} shards, {:.2f} MB\nlook at it:  frugal inspect {}",
        r.out_dir, r.seconds, r.record_content, r.sources, static_cast<double>(r.bytes_in) / 1e6, counts, r.shards,
        static_cast<double>(r.bytes_out) / 1e6, shell_word(r.out_dir));
  }
  if (r.kind == "records") {
    const std::string counts =
        fmt::format("  samples     {} train / {} val ({} classes); records {} train / {} val, each {}", r.train_samples,
                    r.val_samples, r.classes, r.train_records, r.val_records, r.record_shape);
    if (r.up_to_date)
      return fmt::format(
          "{} is up to date: same options, and all {} inputs ({:.1f} MB) hash as before; "
          "nothing to do ({:.2f} s). Pass --force to rebuild.\n{}",
          r.out_dir, r.sources, static_cast<double>(r.bytes_in) / 1e6, r.seconds, counts);
    const double samples = static_cast<double>(r.train_samples + r.val_samples);
    return fmt::format(
        "prepared {} in {:.2f} s\n"
        "  inputs      {} files, {:.2f} MB\n{}\n"
        "  {}\n"
        "  output      {} shards, {:.2f} MB\n"
        "train with:   --set data.source={}  (in the program that trains your model on records)",
        r.out_dir, r.seconds, r.sources, static_cast<double>(r.bytes_in) / 1e6, counts,
        r.record_content == "table"
            ? fmt::format("parsing     {:.2f} s ({:.0f} rows/s)", r.decode_s, samples / std::max(r.decode_s, 1e-9))
            : fmt::format("decoding    {:.2f} s with {} threads ({:.0f} images/s)", r.decode_s, r.threads,
                          samples / std::max(r.decode_s, 1e-9)),
        r.shards, static_cast<double>(r.bytes_out) / 1e6, shell_word("records:" + r.out_dir));
  }
  if (r.up_to_date)
    return fmt::format(
        "{} is up to date: same options, and all {} inputs ({:.1f} MB) hash as before; "
        "nothing to do ({:.2f} s). Pass --force to rebuild.\n"
        "  {} documents, {} tokens ({} train / {} val), tokenizer {} (vocab {})",
        r.out_dir, r.sources, static_cast<double>(r.bytes_in) / 1e6, r.seconds, r.documents, r.tokens, r.train_tokens,
        r.val_tokens, r.tokenizer, r.vocab);
  return fmt::format(
      "prepared {} in {:.2f} s\n"
      "  inputs      {} files, {:.2f} MB, {} documents\n"
      "  dedup       {} exact duplicates and {} near duplicates removed; {} documents kept\n"
      "  tokens      {} ({} train / {} val), tokenizer {} (vocab {})\n"
      "  tokenising  {:.2f} s with {} threads ({:.1f} MB/s)\n"
      "  output      {} shards, {:.2f} MB\n"
      "train with:   frugal train --set data.source={}",
      r.out_dir, r.seconds, r.sources, static_cast<double>(r.bytes_in) / 1e6, r.documents_in, r.exact_removed,
      r.near_removed, r.documents, r.tokens, r.train_tokens, r.val_tokens, r.tokenizer, r.vocab, r.tokenize_s,
      r.threads, static_cast<double>(r.bytes_kept) / 1e6 / std::max(r.tokenize_s, 1e-9), r.shards,
      static_cast<double>(r.bytes_out) / 1e6, shell_word("shards:" + r.out_dir));
}

}  // namespace

std::string format_report(const PrepareReport& r) {
  std::string text = report_text(r);
  for (const std::string& w : r.warnings) text += "\nwarning: " + w;
  return text;
}

namespace detail {
namespace {

// An empty validation split of a dataset of `n` items ("document", "sample", "token"), and what to change.
std::string empty_val(const PrepareOptions& o, int64_t n, const char* item) {
  const std::string fix = o.val_fraction <= 0 ? "prepare it again with --val-fraction above 0"
                          : n < 2 ? fmt::format("a single {} cannot be split: prepare it again with more data", item)
                                  : "prepare it again with a larger --val-fraction";
  return fmt::format(
      "the validation split is empty ({} {}{}, --val-fraction {}): frugal train evaluates on it (every "
      "train.eval_every steps and at the end) and cannot train on this dataset without one; {}",
      n, item, n == 1 ? "" : "s", o.val_fraction, fix);
}

// Why a documents dataset has no training document: every one went to validation, or none kept a
// target (a trained token after its first; prepare drops the others).
std::string no_training_documents(const PrepareOptions& o, const PrepareReport& r) {
  if (r.documents > 0)
    return fmt::format(
        "the training split is empty: every one of the {} documents went to the validation split (--val-fraction "
        "{}); prepare again with more documents or a lower --val-fraction",
        r.documents, o.val_fraction);
  const bool split = o.overflow == "split";
  const std::string cut =
      o.max_tokens <= 0 ? ""
      : split           ? fmt::format(", {} split into pieces of --max-tokens {}", r.split_documents, o.max_tokens)
              : fmt::format(", {} truncated to their first --max-tokens {}", r.truncated_documents, o.max_tokens);
  const std::string fix =
      o.max_tokens <= 0 ? (o.train_on_prompt ? "give documents of at least 2 tokens"
                                             : "check that the assistant's turns (or the completions) are not empty, "
                                               "or pass --train-on-prompt")
      : split           ? "raise --max-tokens (a piece trains only on the trained tokens after its first)"
              : "raise --max-tokens past the trained tokens, or pass --overflow split to keep the rest of each "
                "document as pieces of its own";
  return fmt::format(
      "none of the {} documents read keeps a token to train on ({} {}dropped{}), so the training split would be "
      "empty; {}",
      r.documents_in, r.dropped_documents, split && o.max_tokens > 0 ? "pieces " : "", cut, fix);
}

}  // namespace

void check_splits(const PrepareOptions& o, PrepareReport* r) {
  if (r->kind == "documents") {  // each one kept has a target (masked_prepare.cpp drops the others)
    if (r->train_records == 0) throw DataError(no_training_documents(o, *r));
    if (r->val_records == 0) r->warnings.push_back(empty_val(o, r->documents, "document"));
  } else if (r->kind == "records") {
    if (r->train_samples == 0)
      throw DataError(fmt::format(
          "the training split is empty: every one of the {} samples went to the validation split; prepare again "
          "with more samples or a lower --val-fraction",
          r->val_samples));
    if (r->val_samples == 0) r->warnings.push_back(empty_val(o, r->train_samples, "sample"));
  } else {
    if (r->train_tokens < 2)
      throw DataError(fmt::format(
          "the training split holds {} tokens (of {}), and a target needs 2 (a token and the next); give more text",
          r->train_tokens, r->tokens));
    if (r->val_tokens == 0) r->warnings.push_back(empty_val(o, r->tokens, "token"));
  }
}

}  // namespace detail
}  // namespace frugal
