// Tokenisers for `frugal prepare` and `frugal sample`: byte-level (vocabulary 256, no model),
// SentencePiece, and Hugging Face tokenizer.json files.
//
// SentencePiece runs in a helper process, `frugal-spm` (built beside `frugal`), because Debian's
// libsentencepiece carries its own copy of protobuf whose symbols clash with the protobuf that
// LibTorch loads: linking both into one process crashes at start-up. The helper links
// SentencePiece alone; frugal talks to it through files in the output's temporary directory.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace frugal {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  virtual std::string name() const = 0;  // "bytes", "sentencepiece" or "hf"
  virtual int64_t vocab() const = 0;
  // Tokens appended after every document in the stream (documents are never glued together).
  virtual std::vector<int32_t> separator() const = 0;
  // Tokenises docs with `threads` parallel workers; the result is in document order and does not
  // depend on the thread count. `work_dir` is a scratch directory the call may use.
  virtual std::vector<std::vector<int32_t>> encode(const std::vector<std::string>& docs, int threads,
                                                   const std::string& work_dir) const = 0;
  // The text of `ids` (what `frugal sample` prints). `work_dir` is a scratch directory the call
  // may use. Ids outside the vocabulary throw DataError.
  virtual std::string decode(const std::vector<int32_t>& ids, const std::string& work_dir) const = 0;
  // The model file to copy into the dataset ("" for bytes).
  virtual std::string model_path() const = 0;
};

// Byte-level: token = byte value; documents are separated by the two bytes "\n\n".
std::unique_ptr<Tokenizer> make_byte_tokenizer();

// Loads an existing SentencePiece model. Throws DataError if the helper cannot read it.
std::unique_ptr<Tokenizer> load_sentencepiece(const std::string& model_path);

// Trains a SentencePiece (unigram, byte fallback) model with `vocab` pieces on docs and writes
// it to `model_path`. Throws DataError with the trainer's message on failure.
std::unique_ptr<Tokenizer> train_sentencepiece(const std::vector<std::string>& docs, int64_t vocab, int threads,
                                               const std::string& model_path, const std::string& work_dir);

// A Hugging Face tokenizer.json, run by the reference `tokenizers` library in a helper process:
// `hf_tokenizer_python()` running src/spm/frugal_hf_tokenizer.py (so the ids are the library's
// own). Documents end with the tokenizer's end-of-text token (<|endoftext|>, </s>, ...), else the
// ids of "\n\n". Throws DataError when the file does not load, ConfigError when that Python has no
// `tokenizers` package.
std::unique_ptr<Tokenizer> load_hf_tokenizer(const std::string& tokenizer_json);
// The vocab_size of a nanoGPT dataset's meta.pkl (its prepare.py writes one for character-level
// data), read by the helper above with an unpickler that builds plain data only. Throws DataError
// naming the file when it is not such a file, ConfigError when no Python can be started.
int64_t nanogpt_meta_vocab(const std::string& meta_pkl);
// A chat or prompt-completion document as `frugal prepare` stores it (docs/data.md): its token ids
// and a loss mask (1 = trained on).
struct MaskedDocument {
  std::vector<int32_t> ids;
  std::vector<uint8_t> mask;
};
// `docs` (each one JSON object, a jsonl line: {"messages": [...]} or {"prompt", "completion"})
// rendered with a chat template and tokenised by the Hugging Face tokenizer `tokenizer_json`, in
// the helper above (src/spm/frugal_chat.py says how: transformers' renderer and mask rules).
// `chat_template` is a Jinja file, or "" for the tokenizer directory's own. Throws DataError whose
// message holds "document K: " (K 0-based) for a document the helper refused. `template_used`, where
// given, receives the template's text the documents were rendered with ("" when none was).
std::vector<MaskedDocument> encode_masked_documents(const std::string& tokenizer_json, const std::string& chat_template,
                                                    bool prompt_completion, bool train_on_prompt,
                                                    const std::vector<std::string>& docs, const std::string& work_dir,
                                                    std::string* template_used = nullptr);
// Each of `pieces` decoded by the Hugging Face tokenizer `tokenizer_json`, special tokens shown (one
// helper process for all of them).
std::vector<std::string> decode_pieces(const std::string& tokenizer_json,
                                       const std::vector<std::vector<int32_t>>& pieces);
// $FRUGAL_PYTHON, else the Python the build took LibTorch from (.venv/bin/python), else
// /usr/bin/python3.
std::string hf_tokenizer_python();
// $FRUGAL_HF_TOKENIZER, else frugal_hf_tokenizer.py beside the running program or in
// <program dir>/../libexec/frugal/, else the installed path, else the source tree's.
std::string hf_tokenizer_helper_path();

// The helper executable, the first that exists of: $FRUGAL_SPM; `frugal-spm` beside the running
// program or one folder up; <program dir>/../libexec/frugal/frugal-spm (an installed `frugal`);
// the path a program registered with set_spm_helper_path() (<frugal/frugal.h> does that for
// programs built against the installed CMake package); the install path compiled in; else the
// build-tree path compiled in.
std::string spm_helper_path();
// Throws ConfigError (naming `what`) when this build has no SentencePiece helper and FRUGAL_SPM
// names none either (see frugal/core/features.h).
void require_sentencepiece(std::string_view what);
// Registers an installed helper for spm_helper_path(). Returns true (for static registration).
bool set_spm_helper_path(const std::string& path);

}  // namespace frugal
