// A small CNN image classifier on a folder of images (one subfolder per class), trained with
// frugal's Trainer in bf16 mixed precision, with offline augmentation: each training image's
// augmented variants (random crop with padding, horizontal flip) are made once before training,
// not in every step. See README.md beside this file.
//
//   cnn_images generate DIR [PER_CLASS]     writes DIR/<class>/<n>.ppm: circles, squares, crosses
//   cnn_images train DIR [--augment N] [--set key=value]... [--resume auto]
#include <torch/torch.h>

#include <frugal/frugal.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace fs = std::filesystem;

namespace {

constexpr int64_t kSide = 24;  // images are kSide x kSide RGB

// conv(3->16) -> pool -> conv(16->32) -> pool -> linear(classes).
struct CnnImpl : torch::nn::Module {
  explicit CnnImpl(int64_t classes)
      : conv1(register_module("conv1", torch::nn::Conv2d(torch::nn::Conv2dOptions(3, 16, 3).padding(1)))),
        conv2(register_module("conv2", torch::nn::Conv2d(torch::nn::Conv2dOptions(16, 32, 3).padding(1)))),
        head(register_module("head", torch::nn::Linear(32 * (kSide / 4) * (kSide / 4), classes))) {}
  at::Tensor forward(at::Tensor x) {
    x = torch::max_pool2d(torch::relu(conv1(x)), 2);
    x = torch::max_pool2d(torch::relu(conv2(x)), 2);
    return head(x.flatten(1));
  }
  torch::nn::Conv2d conv1, conv2;
  torch::nn::Linear head;
};

// ---- the image folder (binary PPM, P6) -------------------------------------------------------
void write_ppm(const fs::path& path, const at::Tensor& img) {  // img: (3, H, W) float in [0, 1]
  at::Tensor hwc = (img.permute({1, 2, 0}).clamp(0, 1) * 255).round().to(torch::kUInt8).contiguous();
  std::ofstream out(path, std::ios::binary);
  out << "P6\n" << img.size(2) << " " << img.size(1) << "\n255\n";
  out.write(reinterpret_cast<const char*>(hwc.data_ptr<uint8_t>()), hwc.numel());
}

at::Tensor read_ppm(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::string magic;
  int64_t w = 0, h = 0, maxval = 0;
  in >> magic >> w >> h >> maxval;
  in.get();
  if (magic != "P6" || w != kSide || h != kSide || maxval != 255)
    throw frugal::DataError(path.string() + ": expected a binary PPM (P6) of " + std::to_string(kSide) + "x" +
                            std::to_string(kSide) + " pixels, 8 bits per channel");
  at::Tensor hwc = torch::empty({h, w, 3}, torch::kUInt8);
  in.read(reinterpret_cast<char*>(hwc.data_ptr<uint8_t>()), hwc.numel());
  if (!in) throw frugal::DataError(path.string() + ": truncated pixel data");
  return hwc.permute({2, 0, 1}).to(torch::kFloat) / 255.0;
}

// One shape of a random colour, size and position on a noisy background.
at::Tensor draw(int64_t cls, torch::Generator& g) {
  auto u = [&](double lo, double hi) { return lo + (hi - lo) * torch::rand({1}, g).item<double>(); };
  at::Tensor yy = torch::arange(kSide).view({kSide, 1}).to(torch::kFloat).expand({kSide, kSide});
  at::Tensor xx = torch::arange(kSide).view({1, kSide}).to(torch::kFloat).expand({kSide, kSide});
  const double cy = u(7, 17), cx = u(7, 17), r = u(3.5, 6.5);
  at::Tensor dy = (yy - cy).abs(), dx = (xx - cx).abs(), mask;
  if (cls == 0) mask = (dy * dy + dx * dx) <= r * r;                             // circle
  else if (cls == 1) mask = (dy <= r) & (dx <= r);                               // square
  else mask = ((dy <= r) & (dx <= r / 3)) | ((dx <= r) & (dy <= r / 3));         // cross
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
      std::snprintf(name, sizeof name, "%04lld.ppm", static_cast<long long>(i));
      write_ppm(dir / kClasses[c] / name, draw(static_cast<int64_t>(c), g));
    }
  }
  std::printf("wrote %lld images in %zu classes under %s\n", static_cast<long long>(per_class) * 3,
              kClasses.size(), dir.c_str());
}

// ---- loading with offline augmentation ------------------------------------------------------
struct Images {
  at::Tensor x;  // (N, 3, H, W) float
  at::Tensor y;  // (N) int64
};

// A random crop of the zero-padded image (pad 2) and a coin-flip horizontal mirror.
at::Tensor augment(const at::Tensor& img, torch::Generator& g) {
  at::Tensor padded = torch::constant_pad_nd(img, {2, 2, 2, 2}, 0);
  const int64_t oy = torch::randint(0, 5, {1}, g).item<int64_t>(), ox = torch::randint(0, 5, {1}, g).item<int64_t>();
  at::Tensor out = padded.narrow(1, oy, kSide).narrow(2, ox, kSide);
  if (torch::rand({1}, g).item<double>() < 0.5) out = out.flip({2});
  return out.contiguous();
}

// Every 5th image of each class is held out for validation; each training image is stored with
// `augment` augmented variants (made once, here, with a seeded generator).
void load(const fs::path& dir, int64_t augment_n, uint64_t seed, Images& train, Images& val) {
  std::vector<at::Tensor> tx, vx;
  std::vector<int64_t> ty, vy;
  auto g = at::make_generator<at::CPUGeneratorImpl>(seed);
  for (size_t c = 0; c < kClasses.size(); ++c) {
    std::vector<fs::path> files;
    if (fs::is_directory(dir / kClasses[c]))
      for (const auto& e : fs::directory_iterator(dir / kClasses[c])) files.push_back(e.path());
    std::sort(files.begin(), files.end());
    if (files.empty())
      throw frugal::DataError((dir / kClasses[c]).string() + ": no images (run `cnn_images generate " +
                              dir.string() + "` first)");
    for (size_t i = 0; i < files.size(); ++i) {
      at::Tensor img = read_ppm(files[i]);
      if (i % 5 == 4) {
        vx.push_back(img);
        vy.push_back(static_cast<int64_t>(c));
        continue;
      }
      tx.push_back(img);
      ty.push_back(static_cast<int64_t>(c));
      for (int64_t a = 0; a < augment_n; ++a) {
        tx.push_back(augment(img, g));
        ty.push_back(static_cast<int64_t>(c));
      }
    }
  }
  train = {torch::stack(tx), torch::tensor(ty)};
  val = {torch::stack(vx), torch::tensor(vy)};
}

frugal::DatasetSplit split(const Images& im) {
  at::Tensor x = im.x, y = im.y;
  return frugal::sample_function([x, y](int64_t i) { return torch::data::Example<>(x[i], y[i]); }, x.size(0));
}

int train(const fs::path& dir, int64_t augment_n, std::vector<std::string> sets, const std::string& resume) {
  sets.insert(sets.begin(), {"run.name=cnn_images", "data.micro_batch=32", "train.steps=200",
                             "train.warmup_steps=20", "train.lr=0.003", "train.eval_every=50",
                             "train.eval_batches=4", "train.log_every=25", "precision.mode=bf16"});
  frugal::ResolvedConfig rc = frugal::resolve_config("", sets, frugal::process_environment());
  const frugal::Config& c = rc.config;

  Images tr, va;
  load(dir, augment_n, static_cast<uint64_t>(c.run.seed), tr, va);
  torch::manual_seed(static_cast<uint64_t>(c.run.seed));
  auto net = std::make_shared<CnnImpl>(static_cast<int64_t>(kClasses.size()));
  frugal::Task task = frugal::make_task(net, [](CnnImpl& m, const frugal::Batch& b) {
    // Under bf16 autocast the convolutions run in bf16; the loss is computed in fp32.
    return torch::nn::functional::cross_entropy(m.forward(b.x).to(torch::kFloat), b.y);
  });
  task.data = std::make_shared<frugal::DatasetSource>(
      split(tr), split(va), c.data.micro_batch, static_cast<uint64_t>(c.run.seed),
      dir.string() + " (x" + std::to_string(1 + augment_n) + " with offline augmentation)");
  task.hooks.describe = "CNN conv16-conv32-linear on " + std::to_string(kSide) + "x" + std::to_string(kSide) + " RGB";
  at::Tensor vx = va.x, vy = va.y;
  task.hooks.extend_summary = [net, vx, vy](nlohmann::ordered_json& s) {
    torch::NoGradGuard no_grad;
    net->eval();
    s["val_accuracy"] = net->forward(vx).argmax(1).eq(vy).to(torch::kFloat).mean().item<double>();
    net->train();
  };

  frugal::TrainerOptions o;
  o.resume = resume;
  o.handle_signals = true;
  o.overwrite = resume.empty();
  frugal::Trainer trainer(rc, task, o);
  nlohmann::json s = trainer.fit();
  std::printf("%s | val_loss %.4f | val_accuracy %.3f | %s | %s\n", s["precision"].get<std::string>().c_str(),
              s["final_val_loss"].get<double>(), s["val_accuracy"].get<double>(),
              s["stop_kind"].get<std::string>().c_str(), trainer.run_dir().c_str());
  return s["stop_kind"] == "preempted" ? 75 : 0;
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
      int64_t augment_n = 2;
      for (size_t i = 2; i + 1 < args.size(); i += 2) {
        if (args[i] == "--set") sets.push_back(args[i + 1]);
        else if (args[i] == "--resume") resume = args[i + 1];
        else if (args[i] == "--augment") augment_n = std::stoll(args[i + 1]);
        else throw frugal::ConfigError("unknown argument " + args[i] + " (expected --set, --augment or --resume)");
      }
      return train(args[1], augment_n, sets, resume);
    }
    std::fprintf(stderr, "usage: cnn_images generate DIR [PER_CLASS] | cnn_images train DIR [--augment N] "
                         "[--set k=v]... [--resume auto]\n");
    return 2;
  } catch (const frugal::ConfigError& e) {
    std::fprintf(stderr, "cnn_images: config error: %s\n", e.what());
    return 2;
  } catch (const frugal::DataError& e) {
    std::fprintf(stderr, "cnn_images: data error: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cnn_images: error: %s\n", e.what());
    return 1;
  }
}
