// A small CNN image classifier on a folder of images (one subfolder per class), trained with
// frugal's Trainer in bf16 mixed precision from record shards that `frugal prepare --format images
// --augment N` wrote once: decoding, resizing and the augmented variants (random crop with
// padding, horizontal flip, colour jitter) are paid at prepare time, not in every step. See
// README.md beside this file.
//
//   cnn_images generate IMAGES_DIR [PER_CLASS]   writes IMAGES_DIR/<class>/<n>.png
//   frugal prepare IMAGES_DIR --format images --size 24 --augment 2 --out DATASET_DIR
//   cnn_images train DATASET_DIR [--set key=value]... [--resume auto]
#include <torch/torch.h>

#include <frugal/frugal.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace fs = std::filesystem;

namespace {

constexpr int64_t kSide = 24;  // generated images are kSide x kSide RGB

// conv(3->16) -> pool -> conv(16->32) -> pool -> linear(classes).
struct CnnImpl : torch::nn::Module {
  CnnImpl(int64_t height, int64_t width, int64_t classes)
      : conv1(register_module("conv1", torch::nn::Conv2d(torch::nn::Conv2dOptions(3, 16, 3).padding(1)))),
        conv2(register_module("conv2", torch::nn::Conv2d(torch::nn::Conv2dOptions(16, 32, 3).padding(1)))),
        head(register_module("head", torch::nn::Linear(32 * (height / 4) * (width / 4), classes))) {}
  at::Tensor forward(at::Tensor x) {
    x = torch::max_pool2d(torch::relu(conv1(x)), 2);
    x = torch::max_pool2d(torch::relu(conv2(x)), 2);
    return head(x.flatten(1));
  }
  torch::nn::Conv2d conv1, conv2;
  torch::nn::Linear head;
};

// ---- the image folder: PNG files, one sub-folder per class ----------------------------------
void write_png(const fs::path& path, const at::Tensor& img) {  // img: (3, H, W) float in [0, 1]
  at::Tensor hwc = (img.permute({1, 2, 0}).clamp(0, 1) * 255).round().to(torch::kUInt8).contiguous();
  frugal::Image im;
  im.height = static_cast<int>(hwc.size(0));
  im.width = static_cast<int>(hwc.size(1));
  im.rgb.assign(hwc.data_ptr<uint8_t>(), hwc.data_ptr<uint8_t>() + hwc.numel());
  const std::string bytes = frugal::encode_png(im);
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) throw frugal::DataError(path.string() + ": cannot write the image");
}

// One shape of a random colour, size and position on a noisy background.
at::Tensor draw(int64_t cls, torch::Generator& g) {
  auto u = [&](double lo, double hi) { return lo + (hi - lo) * torch::rand({1}, g).item<double>(); };
  at::Tensor yy = torch::arange(kSide).view({kSide, 1}).to(torch::kFloat).expand({kSide, kSide});
  at::Tensor xx = torch::arange(kSide).view({1, kSide}).to(torch::kFloat).expand({kSide, kSide});
  const double cy = u(7, 17), cx = u(7, 17), r = u(3.5, 6.5);
  at::Tensor dy = (yy - cy).abs(), dx = (xx - cx).abs(), mask;
  if (cls == 0)
    mask = (dy * dy + dx * dx) <= r * r;  // circle
  else if (cls == 1)
    mask = (dy <= r) & (dx <= r);  // square
  else
    mask = ((dy <= r) & (dx <= r / 3)) | ((dx <= r) & (dy <= r / 3));  // cross
  at::Tensor colour = torch::rand({3, 1, 1}, g) * 0.7 + 0.3;
  at::Tensor img = torch::rand({3, kSide, kSide}, g) * 0.25;
  return torch::where(mask.unsqueeze(0), colour.expand({3, kSide, kSide}), img);
}

const std::vector<std::string> kClasses = {"circle", "square", "cross"};

void generate(const fs::path& dir, int64_t per_class) {
  auto g = at::make_generator<at::CPUGeneratorImpl>(42);
  for (size_t c = 0; c < kClasses.size(); ++c) {
    fs::create_directories(dir / kClasses[c]);
    for (int64_t i = 0; i < per_class; ++i) {
      char name[32];
      std::snprintf(name, sizeof name, "%04lld.png", static_cast<long long>(i));
      write_png(dir / kClasses[c] / name, draw(static_cast<int64_t>(c), g));
    }
  }
  std::printf("wrote %lld images in %zu classes under %s\n", static_cast<long long>(per_class) * 3, kClasses.size(),
              dir.c_str());
}

// The fraction of the validation split that `net` classifies correctly: one validation batch
// that holds the whole split, from a second records source (the trainer's own stays untouched).
double val_accuracy(CnnImpl& net, frugal::Config c, int64_t val_records) {
  c.data.micro_batch = val_records;
  c.data.workers = 0;
  std::unique_ptr<frugal::BatchSource> src = frugal::make_batch_source(c);
  frugal::Batch b = frugal::to_device(src->val_batch(0), net.conv1->weight.device());
  torch::NoGradGuard no_grad;
  net.eval();
  const double acc = net.forward(b.x).argmax(1).eq(b.y).to(torch::kFloat).mean().item<double>();
  net.train();
  return acc;
}

int train(const std::string& dataset, std::vector<std::string> sets, const std::string& resume) {
  // Defaults for this example; the command line's --set wins (it comes later).
  sets.insert(sets.begin(), {"run.name=cnn_images", "data.source=records:" + dataset, "data.micro_batch=32",
                             "train.steps=600", "train.warmup_steps=20", "train.lr=0.003", "train.eval_every=100",
                             "train.eval_batches=4", "train.log_every=50", "precision.mode=bf16"});
  frugal::ResolvedConfig rc = frugal::resolve_config("", sets, frugal::process_environment());
  const frugal::Config& c = rc.config;

  // The dataset's manifest says the image shape and the classes; the model is sized from them.
  const frugal::RecordDataset ds = frugal::open_record_dataset(dataset);
  if (ds.spec.content != "image" || ds.spec.shape.size() != 3 || ds.spec.shape[1] % 4 || ds.spec.shape[2] % 4)
    throw frugal::DataError(dataset +
                            ": expected images whose sides are multiples of 4 (`frugal prepare "
                            "--format images --size 24`), found " +
                            ds.spec.content + " records");
  const int64_t classes = static_cast<int64_t>(ds.classes.size()), val_records = ds.val.size();
  torch::manual_seed(static_cast<uint64_t>(c.run.seed));
  auto net = std::make_shared<CnnImpl>(ds.spec.shape[1], ds.spec.shape[2], classes);
  frugal::Task task = frugal::make_task(net, [](CnnImpl& m, const frugal::Batch& b) {
    // Under bf16 autocast the convolutions run in bf16; the loss is computed in fp32.
    return torch::nn::functional::cross_entropy(m.forward(b.x).to(torch::kFloat), b.y);
  });
  // task.data stays null: the Trainer reads data.source (records:DIR) with its prefetching loader.
  task.hooks.describe = "CNN conv16-conv32-linear on " + std::to_string(ds.spec.shape[1]) + "x" +
                        std::to_string(ds.spec.shape[2]) + " RGB, " + std::to_string(classes) + " classes";
  const frugal::Config config = c;
  task.hooks.extend_summary = [net, config, val_records](nlohmann::ordered_json& s) {
    s["val_accuracy"] = val_accuracy(*net, config, val_records);
  };

  frugal::TrainerOptions o;
  o.resume = resume;
  o.handle_signals = true;
  o.overwrite = resume.empty();
  frugal::Trainer trainer(rc, task, o);
  nlohmann::json s = trainer.fit();
  std::printf("%s | val_loss %.4f | val_accuracy %.3f | %s | %s\n", s["precision"].get<std::string>().c_str(),
              s["final_val_loss"].get<double>(), s.value("val_accuracy", std::nan("")),
              s["stop_kind"].get<std::string>().c_str(), trainer.run_dir().c_str());
  return frugal::exit_status(frugal::exit_code_for(trainer.stop_kind()));
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  try {
    if (args.size() >= 2 && args[0] == "generate") {
      generate(args[1], args.size() > 2 ? std::stoll(args[2]) : 200);
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
                 "usage: cnn_images generate IMAGES_DIR [PER_CLASS] | cnn_images train DATASET_DIR "
                 "[--set k=v]... [--resume auto]\n(DATASET_DIR: `frugal prepare IMAGES_DIR --format images "
                 "--size 24 --augment 2 --out DATASET_DIR`)\n");
    return frugal::exit_status(frugal::ExitCode::kBadInput);
  } catch (const std::exception& e) {
    // The exit-code table (frugal/core/exit_code.h): 2 for bad config or data, 3 for a guard, else 1.
    std::fprintf(stderr, "cnn_images: %s: %s\n", frugal::error_label(e), e.what());
    return frugal::exit_status(frugal::exit_code_for(e));
  }
}
