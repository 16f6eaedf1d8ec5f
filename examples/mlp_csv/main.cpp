// A user MLP classifier on tabular CSV data, trained with frugal's Trainer: the model and the data
// are the user's, every lever (precision, accumulation, checkpoints/resume, early stopping, the
// budget, metrics, report) comes from the config. See README.md beside this file.
//
//   mlp_csv generate data.csv [ROWS]          writes a synthetic 3-class table (8 features)
//   mlp_csv train data.csv [--set key=value]... [--resume auto]
#include <torch/torch.h>

#include <frugal/frugal.h>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

namespace {

// features -> hidden -> hidden -> classes, with ReLU and dropout.
struct MlpImpl : torch::nn::Module {
  MlpImpl(int64_t features, int64_t hidden, int64_t classes)
      : net(register_module("net", torch::nn::Sequential(
                                       torch::nn::Linear(features, hidden), torch::nn::ReLU(),
                                       torch::nn::Dropout(0.1), torch::nn::Linear(hidden, hidden),
                                       torch::nn::ReLU(), torch::nn::Linear(hidden, classes)))) {}
  at::Tensor forward(const at::Tensor& x) { return net->forward(x); }
  torch::nn::Sequential net;
};

// A CSV with a header row: numeric feature columns, then an integer class label.
struct Table {
  at::Tensor x;  // (rows, features) float
  at::Tensor y;  // (rows) int64
};

Table read_csv(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw frugal::DataError(path + ": cannot open the CSV file");
  std::string line;
  std::getline(in, line);  // header
  std::vector<float> xs;
  std::vector<int64_t> ys;
  int64_t cols = -1, row = 1;
  while (std::getline(in, line)) {
    ++row;
    if (line.empty()) continue;
    std::vector<std::string> cells;
    std::stringstream ss(line);
    for (std::string c; std::getline(ss, c, ',');) cells.push_back(c);
    if (cols < 0) cols = static_cast<int64_t>(cells.size());
    if (static_cast<int64_t>(cells.size()) != cols || cols < 2)
      throw frugal::DataError(path + ":" + std::to_string(row) + ": expected " + std::to_string(cols) +
                              " comma-separated columns, got " + std::to_string(cells.size()));
    for (int64_t i = 0; i + 1 < cols; ++i) xs.push_back(std::stof(cells[static_cast<size_t>(i)]));
    ys.push_back(std::stoll(cells.back()));
  }
  const auto n = static_cast<int64_t>(ys.size());
  return {torch::tensor(xs).view({n, cols - 1}), torch::tensor(ys)};
}

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

// Rows [begin, end) of the table as a dataset split.
frugal::DatasetSplit rows(const Table& t, int64_t begin, int64_t end) {
  at::Tensor x = t.x.narrow(0, begin, end - begin), y = t.y.narrow(0, begin, end - begin);
  return frugal::sample_function([x, y](int64_t i) { return torch::data::Example<>(x[i], y[i]); }, end - begin);
}

int train(const std::string& csv, std::vector<std::string> sets, const std::string& resume) {
  // Defaults for this example; the command line's --set wins (it comes later).
  sets.insert(sets.begin(), {"run.name=mlp_csv", "data.micro_batch=64", "train.steps=300",
                             "train.warmup_steps=20", "train.lr=0.003", "train.eval_every=100",
                             "train.eval_batches=4", "train.log_every=50", "precision.mode=fp32"});
  frugal::ResolvedConfig rc = frugal::resolve_config("", sets, frugal::process_environment());
  const frugal::Config& c = rc.config;

  Table table = read_csv(csv);
  const int64_t n = table.y.size(0), val = std::max<int64_t>(1, n / 5);
  const int64_t classes = table.y.max().item<int64_t>() + 1;
  torch::manual_seed(static_cast<uint64_t>(c.run.seed));
  auto net = std::make_shared<MlpImpl>(table.x.size(1), 64, classes);

  frugal::Task task = frugal::make_task(net, [](MlpImpl& m, const frugal::Batch& b) {
    return torch::nn::functional::cross_entropy(m.forward(b.x), b.y);
  });
  task.data = std::make_shared<frugal::DatasetSource>(rows(table, 0, n - val), rows(table, n - val, n),
                                                      c.data.micro_batch, static_cast<uint64_t>(c.run.seed), csv);
  task.hooks.describe = "MLP " + std::to_string(table.x.size(1)) + "-64-64-" + std::to_string(classes);
  // An extra figure in summary.json: accuracy on the held-out rows.
  at::Tensor vx = table.x.narrow(0, n - val, val), vy = table.y.narrow(0, n - val, val);
  task.hooks.extend_summary = [net, vx, vy](nlohmann::ordered_json& s) {
    torch::NoGradGuard no_grad;
    net->eval();
    s["val_accuracy"] = net->forward(vx).argmax(1).eq(vy).to(torch::kFloat).mean().item<double>();
    net->train();
  };

  frugal::TrainerOptions o;
  o.resume = resume;
  o.handle_signals = true;  // Ctrl-C: checkpoint, exit 75, continue with --resume auto
  o.overwrite = resume.empty();
  frugal::Trainer trainer(rc, task, o);
  nlohmann::json s = trainer.fit();
  std::printf("val_loss %.4f | val_accuracy %.3f | %s | %s\n", s["final_val_loss"].get<double>(),
              s["val_accuracy"].get<double>(), s["stop_reason"].get<std::string>().c_str(),
              trainer.run_dir().c_str());
  return s["stop_kind"] == "preempted" ? 75 : 0;
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
      for (size_t i = 2; i + 1 < args.size(); i += 2) {
        if (args[i] == "--set") sets.push_back(args[i + 1]);
        else if (args[i] == "--resume") resume = args[i + 1];
        else throw frugal::ConfigError("unknown argument " + args[i] + " (expected --set or --resume)");
      }
      return train(args[1], sets, resume);
    }
    std::fprintf(stderr, "usage: mlp_csv generate DATA.csv [ROWS] | mlp_csv train DATA.csv [--set k=v]... [--resume auto]\n");
    return 2;
  } catch (const frugal::ConfigError& e) {
    std::fprintf(stderr, "mlp_csv: config error: %s\n", e.what());
    return 2;
  } catch (const frugal::DataError& e) {
    std::fprintf(stderr, "mlp_csv: data error: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mlp_csv: error: %s\n", e.what());
    return 1;
  }
}
