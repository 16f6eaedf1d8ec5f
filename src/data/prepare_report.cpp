// format_report: `frugal prepare`'s closing report; see prepare.h.
#include <fmt/format.h>

#include <algorithm>

#include "frugal/core/console.h"
#include "frugal/data/prepare.h"

namespace frugal {

std::string format_report(const PrepareReport& r) {
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

}  // namespace frugal
