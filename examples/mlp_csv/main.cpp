// A user MLP classifier on tabular CSV data, trained with frugal's Trainer: the model is the
// user's, the table goes through `frugal prepare --format csv` once (parsed, split, stored as
// record shards with per-feature statistics), and every lever (precision, accumulation,
// checkpoints/resume, early stopping, the budget, metrics, report) comes from the config. See
// README.md beside this file.
//
//   mlp_csv generate data.csv [ROWS]          writes a synthetic 3-class table (8 features)
//   frugal prepare data.csv --format csv --val-fraction 0.2 --out data.rec
//   mlp_csv train data.rec [--set key=value]... [--resume auto]
#include <torch/torch.h>

#include <frugal/frugal.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

namespace {

// Standardise (with the training split's statistics) -> hidden -> hidden -> classes, with ReLU and
// dropout. mean and stdev are buffers: they travel with the checkpoint.
struct MlpImpl : torch::nn::Module {
  MlpImpl(const std::vector<float>& mean, const std::vector<float>& stdev, int64_t hidden, int64_t classes)
      : mean(register_buffer("mean", torch::tensor(mean))),
        stdev(register_buffer("stdev", torch::tensor(stdev).clamp_min(1e-6))),
        net(register_module(
            "net", torch::nn::Sequential(torch::nn::Linear(static_cast<int64_t>(mean.size()), hidden),
                                         torch::nn::ReLU(), torch::nn::Dropout(0.1), torch::nn::Linear(hidden, hidden),
                                         torch::nn::ReLU(), torch::nn::Linear(hidden, classes)))) {}
  at::Tensor forward(const at::Tensor& x) { return net->forward((x - mean) / stdev); }
  at::Tensor mean, stdev;
  torch::nn::Sequential net;
};

// Three classes around seeded centres in 8 dimensions, with overlap (so accuracy is not 100%).
void generate(const std::string& path, int64_t rows) {
  torch::manual_seed(42);
  at::Tensor centres = torch::randn({3, 8}) * 1.2;
  at::Tensor y = torch::randint(0, 3, {rows});
  at::Tensor x = centres.index_select(0, y) + torch::randn({rows, 8});
  std::ofstream out(path);
  out << "f0,f1,f2,f3,f4,f5,f6,f7,label\n";
  auto xa = x.accessor<float, 2>();
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < 8; ++c) out << xa[r][c] << ",";
    out << y[r].item<int64_t>() << "\n";
  }
  std::printf("wrote %lld rows to %s\n", static_cast<long long>(rows), path.c_str());
}

// The fraction of the validation split that `net` classifies correctly: one validation batch
// that holds the whole split, from a second records source (the trainer's own stays untouched).
double val_accuracy(MlpImpl& net, frugal::Config c, int64_t val_records) {
  c.data.micro_batch = val_records;
  c.data.workers = 0;
  std::unique_ptr<frugal::BatchSource> src = frugal::make_batch_source(c);
  frugal::Batch b = frugal::to_device(src->val_batch(0), net.mean.device());
  torch::NoGradGuard no_grad;
  net.eval();
  const double acc = net.forward(b.x).argmax(1).eq(b.y).to(torch::kFloat).mean().item<double>();
  net.train();
  return acc;
}

int train(const std::string& dataset, std::vector<std::string> sets, const std::string& resume) {
  // Defaults for this example; the command line's --set wins (it comes later).
  sets.insert(sets.begin(), {"run.name=mlp_csv", "data.source=records:" + dataset, "data.micro_batch=64",
                             "train.steps=300", "train.warmup_steps=20", "train.lr=0.003", "train.eval_every=100",
                             "train.eval_batches=4", "train.log_every=50", "precision.mode=fp32"});
  frugal::ResolvedConfig rc = frugal::resolve_config("", sets, frugal::process_environment());
  const frugal::Config& c = rc.config;

  // The dataset's manifest (docs/data.md) says the columns, the classes and the training split's
  // per-feature mean and standard deviation; the model is sized and standardised from it.
  const frugal::RecordDataset ds = frugal::open_record_dataset(dataset);
  if (ds.spec.content != "table")
    throw frugal::DataError(dataset + ": expected a table (`frugal prepare --format csv`), found " + ds.spec.content);
  std::ifstream mf(dataset + "/manifest.json");
  const nlohmann::json manifest = nlohmann::json::parse(mf);
  const auto mean = manifest.at("feature_stats").at("mean").get<std::vector<float>>();
  const auto stdev = manifest.at("feature_stats").at("std").get<std::vector<float>>();
  const int64_t classes = static_cast<int64_t>(ds.classes.size()), val_records = ds.val.size();
  torch::manual_seed(static_cast<uint64_t>(c.run.seed));
  auto net = std::make_shared<MlpImpl>(mean, stdev, 64, classes);

  frugal::Task task = frugal::make_task(net, [](MlpImpl& m, const frugal::Batch& b) {
    return torch::nn::functional::cross_entropy(m.forward(b.x), b.y);
  });
  // task.data stays null: the Trainer reads data.source (records:DIR) with its prefetching loader.
  task.hooks.describe = "MLP " + std::to_string(mean.size()) + "-64-64-" + std::to_string(classes);
  // An extra figure in summary.json: accuracy on the held-out rows.
  const frugal::Config config = c;
  task.hooks.extend_summary = [net, config, val_records](nlohmann::ordered_json& s) {
    s["val_accuracy"] = val_accuracy(*net, config, val_records);
  };

  frugal::TrainerOptions o;
  o.resume = resume;
  o.handle_signals = true;  // Ctrl-C: checkpoint, exit 75, continue with --resume auto
  o.overwrite = resume.empty();
  frugal::Trainer trainer(rc, task, o);
  nlohmann::json s = trainer.fit();
  std::printf("val_loss %.4f | val_accuracy %.3f | %s | %s\n", s["final_val_loss"].get<double>(),
              s.value("val_accuracy", std::nan("")), s["stop_reason"].get<std::string>().c_str(),
              trainer.run_dir().c_str());
  return frugal::exit_status(frugal::exit_code_for(trainer.stop_kind()));
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  try {
    if (args.size() >= 2 && args[0] == "generate") {
      generate(args[1], args.size() > 2 ? std::stoll(args[2]) : 3000);
      return 0;
    }
    if (args.size() >= 2 && args[0] == "train") {
      std::vector<std::string> sets;
      std::string resume;
      for (size_t i = 2; i < args.size(); i += 2) {
        if (i + 1 == args.size()) throw frugal::ConfigError(args[i] + " needs a value");
        if (args[i] == "--set")
          sets.push_back(args[i + 1]);
        else if (args[i] == "--resume")
          resume = args[i + 1];
        else
          throw frugal::ConfigError("unknown argument " + args[i] + " (expected --set or --resume)");
      }
      return train(args[1], sets, resume);
    }
    std::fprintf(stderr,
                 "usage: mlp_csv generate DATA.csv [ROWS] | mlp_csv train DATASET_DIR [--set k=v]... [--resume auto]\n"
                 "(DATASET_DIR: `frugal prepare DATA.csv --format csv --val-fraction 0.2 --out DATASET_DIR`)\n");
    return frugal::exit_status(frugal::ExitCode::kBadInput);
  } catch (const std::exception& e) {
    // The exit-code table (frugal/core/exit_code.h): 2 for bad config or data, 3 for a guard, else 1.
    std::fprintf(stderr, "mlp_csv: %s: %s\n", frugal::error_label(e), e.what());
    return frugal::exit_status(frugal::exit_code_for(e));
  }
}
