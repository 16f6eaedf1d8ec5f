// frugal-spm: the SentencePiece helper process of `frugal prepare` (see tokenizer.h for why it is
// a separate program). Not meant to be run by hand; the protocol is:
//
//   frugal-spm train INPUT.txt PREFIX VOCAB THREADS   writes PREFIX.model (one sentence per line)
//   frugal-spm info MODEL                            prints "vocab N eos E"
//   frugal-spm encode MODEL IN OUT                   IN:  (u64 length, bytes)* per document
//                                                    OUT: (u32 count, u32 token*)* per document
//   frugal-spm decode MODEL IN OUT                   IN:  u32 token*; OUT: the text's bytes
// Integers are little-endian. Errors go to stderr with exit code 1.
#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <string>
#include <unordered_map>
#include <vector>

namespace {

int fail(const std::string& what) {
  std::cerr << "frugal-spm: " << what << "\n";
  return 1;
}

bool read_u64(std::istream& in, uint64_t* v) {
  unsigned char b[8];
  if (!in.read(reinterpret_cast<char*>(b), 8)) return false;
  *v = 0;
  for (int i = 7; i >= 0; --i) *v = (*v << 8) | b[i];
  return true;
}

void write_u32(std::ostream& out, uint32_t v) {
  const char b[4] = {static_cast<char>(v), static_cast<char>(v >> 8), static_cast<char>(v >> 16),
                     static_cast<char>(v >> 24)};
  out.write(b, 4);
}

// Loads `model` into sp and opens both files; "" when all went well, else what failed.
std::string open_all(sentencepiece::SentencePieceProcessor& sp, const std::string& model, std::ifstream& in,
                     const std::string& in_path, std::ofstream& out, const std::string& out_path) {
  const auto st = sp.Load(model);
  if (!st.ok()) return "cannot load model '" + model + "': " + st.ToString();
  in.open(in_path, std::ios::binary);
  out.open(out_path, std::ios::binary);
  if (!in || !out) return "cannot open '" + in_path + "' or '" + out_path + "'";
  return "";
}

int encode(const std::string& model, const std::string& in_path, const std::string& out_path) {
  sentencepiece::SentencePieceProcessor sp;
  std::ifstream in;
  std::ofstream out;
  if (const std::string why = open_all(sp, model, in, in_path, out, out_path); !why.empty()) return fail(why);
  uint64_t n;
  std::string doc;
  std::vector<int> ids;
  while (read_u64(in, &n)) {
    doc.resize(n);
    if (!in.read(doc.data(), static_cast<std::streamsize>(n))) return fail("truncated input " + in_path);
    ids.clear();
    const auto st = sp.Encode(doc, &ids);
    if (!st.ok()) return fail("encode: " + st.ToString());
    write_u32(out, static_cast<uint32_t>(ids.size()));
    for (int id : ids) write_u32(out, static_cast<uint32_t>(id));
  }
  out.flush();
  return out ? 0 : fail("cannot write '" + out_path + "'");
}

int decode(const std::string& model, const std::string& in_path, const std::string& out_path) {
  sentencepiece::SentencePieceProcessor sp;
  std::ifstream in;
  std::ofstream out;
  if (const std::string why = open_all(sp, model, in, in_path, out, out_path); !why.empty()) return fail(why);
  std::vector<int> ids;
  unsigned char b[4];
  while (in.read(reinterpret_cast<char*>(b), 4))
    ids.push_back(static_cast<int>(b[0] | b[1] << 8 | b[2] << 16 | static_cast<uint32_t>(b[3]) << 24));
  std::string text;
  const auto st = sp.Decode(ids, &text);
  if (!st.ok()) return fail("decode: " + st.ToString());
  out << text;
  out.flush();
  return out ? 0 : fail("cannot write '" + out_path + "'");
}

}  // namespace

int main(int argc, char** argv) {
  const std::vector<std::string> a(argv + 1, argv + argc);
  if (a.size() == 5 && a[0] == "train") {
    const std::unordered_map<std::string, std::string> args = {{"input", a[1]},
                                                               {"model_prefix", a[2]},
                                                               {"vocab_size", a[3]},
                                                               {"num_threads", a[4]},
                                                               {"model_type", "unigram"},
                                                               {"character_coverage", "1.0"},
                                                               {"byte_fallback", "true"},
                                                               {"hard_vocab_limit", "false"},
                                                               {"max_sentence_length", "65536"},
                                                               {"input_sentence_size", "2000000"},
                                                               {"shuffle_input_sentence", "true"},
                                                               {"minloglevel", "2"}};
    auto st = sentencepiece::SentencePieceTrainer::Train(args);
    return st.ok() ? 0 : fail("training failed: " + st.ToString());
  }
  if (a.size() == 2 && a[0] == "info") {
    sentencepiece::SentencePieceProcessor sp;
    auto st = sp.Load(a[1]);
    if (!st.ok()) return fail("cannot load model '" + a[1] + "': " + st.ToString());
    std::printf("vocab %d eos %d\n", sp.GetPieceSize(), sp.eos_id());
    return 0;
  }
  if (a.size() == 4 && a[0] == "encode") return encode(a[1], a[2], a[3]);
  if (a.size() == 4 && a[0] == "decode") return decode(a[1], a[2], a[3]);
  return fail("usage: frugal-spm train|info|encode|decode ... (a helper of `frugal prepare` and `frugal sample`)");
}
