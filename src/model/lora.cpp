// Low-rank adapters; see lora.h.
#include "frugal/model/lora.h"

#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <regex>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "frugal/core/compat.h"
#include "frugal/core/errors.h"
#include "frugal/model/fp8.h"
#include "frugal/model/freeze.h"
#include "frugal/model/model_family.h"
#include "frugal/model/peft.h"

namespace frugal {
namespace F = torch::nn::functional;

namespace {

std::string short_name(const std::string& module) {
  const size_t dot = module.rfind('.');
  return dot == std::string::npos ? module : module.substr(dot + 1);
}

// ||W + s B A|| of each row, without forming B A: ||W||^2 + 2s <B, W A^T> + s^2 <B A A^T, B>.
at::Tensor row_norms(const at::Tensor& w, const at::Tensor& a, const at::Tensor& b, double s) {
  torch::NoGradGuard no_grad;
  const at::Tensor W = w.to(at::kFloat), A = a.to(at::kFloat), B = b.to(at::kFloat);
  const at::Tensor sq =
      W.square().sum(1) + (2 * s) * (B * at::mm(W, A.t())).sum(1) + (s * s) * (at::mm(B, at::mm(A, A.t())) * B).sum(1);
  return sq.clamp_min(0).sqrt();
}

}  // namespace

LoraSiteImpl::LoraSiteImpl(const std::vector<Spec>& parts, const at::Tensor& weight, int64_t rank, double scale,
                           double dropout, bool dora)
    : torch::nn::Module("LoraSite"), rank_(rank), scale_(scale), dropout_(dropout), dora_(dora) {
  const int64_t in = weight.size(1);
  const double bound = 1.0 / std::sqrt(static_cast<double>(in));
  torch::NoGradGuard no_grad;
  for (const Spec& s : parts) {
    Part p{s.hf_module, s.row0, s.rows, {}, {}, {}};
    const std::string n = short_name(s.hf_module);
    const auto opts = at::TensorOptions().dtype(at::kFloat).device(weight.device());
    p.a = register_parameter(n + "_A", at::empty({rank, in}, opts).uniform_(-bound, bound));
    p.b = register_parameter(n + "_B", at::zeros({s.rows, rank}, opts));
    if (dora) p.magnitude = register_parameter(n + "_m", row_norms(weight.narrow(0, s.row0, s.rows), p.a, p.b, 0));
    parts_.push_back(std::move(p));
  }
}

at::Tensor LoraSiteImpl::forward(const at::Tensor& x, const at::Tensor& stored, const at::Tensor& bias) {
  // A bf16 base (lora.base_dtype) under fp32 compute is widened here; autocast casts it itself. An
  // NF4 base is dequantised inside its product.
  const bool widen = !nf4() && stored.scalar_type() != x.scalar_type() && !compat::autocast_enabled(x.device().type());
  const at::Tensor weight = widen ? stored.to(x.scalar_type()) : stored;
  at::Tensor y = nf4() ? nf4_product(x, stored, 0, total_rows(stored), bias) : at::linear(x, weight, bias);
  const bool drop = is_training() && dropout_ > 0;
  const at::Tensor xd = drop ? F::dropout(x, F::DropoutFuncOptions().p(dropout_).training(true)) : x;
  // Every part's rank-r product at once, (..., parts * r), scaled once.
  std::vector<at::Tensor> as;
  for (const Part& p : parts_) as.push_back(p.a);
  const at::Tensor xa = at::linear(xd, as.size() == 1 ? as[0] : at::cat(as)) * scale_;
  if (!dora_) {
    // Each part's update onto its rows of the product, in place (the product's backward does not
    // read it).
    for (size_t k = 0; k < parts_.size(); ++k) {
      const Part& p = parts_[k];
      const at::Tensor d = at::linear(xa.narrow(-1, static_cast<int64_t>(k) * rank_, rank_), p.b);
      if (p.rows == y.size(-1))
        y = y + d;
      else
        y.narrow(-1, p.row0, p.rows).add_(d);
    }
    return y;
  }
  // DoRA, as PEFT computes it: y + (g - 1) * base + g * s x A^T B^T with g = m / ||W + s B A||
  // (held constant), `base` the product without its bias (of the dropped-out input where there is
  // dropout).
  std::vector<at::Tensor> pieces;
  int64_t at = 0;
  for (size_t k = 0; k < parts_.size(); ++k) {
    const Part& p = parts_[k];
    if (p.row0 > at) pieces.push_back(y.narrow(-1, at, p.row0 - at));
    const at::Tensor yp = y.narrow(-1, p.row0, p.rows);
    at::Tensor base = !drop   ? bias.defined() ? yp - bias.narrow(0, p.row0, p.rows) : yp
                      : nf4() ? nf4_product(xd, stored, p.row0, p.rows, at::Tensor())
                              : at::linear(xd, weight.narrow(0, p.row0, p.rows));
    // The rows as this product used them (a dense base already widened above; NF4 dequantised).
    const at::Tensor w = nf4() ? dense_rows(stored, p.row0, p.rows) : weight.narrow(0, p.row0, p.rows);
    const at::Tensor g = p.magnitude / row_norms(w, p.a, p.b, scale_);
    const at::Tensor lora = at::linear(xa.narrow(-1, static_cast<int64_t>(k) * rank_, rank_), p.b);
    pieces.push_back((yp + (g - 1) * base + g * lora).to(y.scalar_type()));
    at = p.row0 + p.rows;
  }
  if (at < y.size(-1)) pieces.push_back(y.narrow(-1, at, y.size(-1) - at));
  return pieces.size() == 1 ? pieces[0] : at::cat(pieces, -1);
}

at::Tensor LoraSiteImpl::merged(const at::Tensor& weight) const {
  torch::NoGradGuard no_grad;
  at::Tensor out = dense_rows(weight.detach(), 0, total_rows(weight)).clone();
  for (const Part& p : parts_) {
    at::Tensor rows = out.narrow(0, p.row0, p.rows);
    const at::Tensor w = rows.clone();
    rows.add_(at::mm(p.b.to(at::kFloat), p.a.to(at::kFloat)), scale_);
    if (dora_) rows.mul_((p.magnitude.to(at::kFloat) / row_norms(w, p.a, p.b, scale_)).unsqueeze(1));
  }
  return out;
}

void LoraSiteImpl::hold_in_nf4(at::Tensor& weight, const std::vector<Spec>& modules) {
  torch::NoGradGuard no_grad;
  in_ = weight.size(1);
  std::vector<at::Tensor> codes;
  int64_t code0 = 0;
  for (const Spec& m : modules) {
    Nf4 q = nf4_quantize(weight.narrow(0, m.row0, m.rows));
    const std::string n = short_name(m.hf_module) + "_nf4_";
    nf4_.push_back({m.row0, m.rows, code0, q.codes.numel(), register_parameter(n + "scalers", q.scalers, false),
                    register_parameter(n + "factors", q.factors, false),
                    register_parameter(n + "mean", q.mean, false)});
    code0 += q.codes.numel();
    codes.push_back(q.codes);
  }
  weight.requires_grad_(false);
  weight.set_data(codes.size() == 1 ? codes[0] : at::cat(codes));  // every holder of the tensor sees it
  // DoRA's magnitudes start from the rows as the run holds them (PEFT's, from the dequantised base).
  if (dora_)
    for (Part& p : parts_) p.magnitude.copy_(row_norms(dense_rows(weight, p.row0, p.rows), p.a, p.b, 0));
}

std::vector<Nf4> LoraSiteImpl::nf4_slices(const at::Tensor& weight, int64_t row0, int64_t rows,
                                          std::vector<int64_t>* counts) const {
  std::vector<Nf4> out;
  for (const Nf4Slice& s : nf4_) {
    if (s.row0 < row0 || s.row0 + s.rows > row0 + rows) continue;
    out.push_back({weight.narrow(0, s.code0, s.codes), s.scalers, s.factors, s.mean});
    counts->push_back(s.rows);
  }
  return out;
}

at::Tensor LoraSiteImpl::nf4_product(const at::Tensor& x, const at::Tensor& weight, int64_t row0, int64_t rows,
                                     const at::Tensor& bias) const {
  std::vector<int64_t> counts;
  const std::vector<Nf4> slices = nf4_slices(weight, row0, rows, &counts);
  return nf4_linear(x, slices, counts, in_, bias.defined() ? bias.narrow(0, row0, rows) : bias);
}

at::Tensor LoraSiteImpl::dense_rows(const at::Tensor& weight, int64_t row0, int64_t rows) const {
  if (!nf4()) return weight.narrow(0, row0, rows).to(at::kFloat);
  std::vector<int64_t> counts;
  std::vector<at::Tensor> parts;
  const std::vector<Nf4> slices = nf4_slices(weight, row0, rows, &counts);
  for (size_t k = 0; k < slices.size(); ++k) parts.push_back(nf4_dequantize(slices[k], {counts[k], in_}));
  return (parts.size() == 1 ? parts[0] : at::cat(parts)).to(at::kFloat);
}

at::Tensor lora_linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias,
                       const std::shared_ptr<LoraSiteImpl>& adapters) {
  return adapters ? adapters->forward(x, weight, bias) : fp8::linear_or_aten(x, weight, bias);
}

namespace {

// PEFT's rule: a target names a module by its full name or by its last names ("q_proj",
// "self_attn.q_proj").
bool targets_module(const std::string& target, const std::string& module) {
  if (target == module) return true;
  return module.size() > target.size() && module.compare(module.size() - target.size(), target.size(), target) == 0 &&
         module[module.size() - target.size() - 1] == '.';
}

// lora.init_from's string target_modules as PEFT reads it (re.fullmatch); ECMAScript's grammar
// agrees with Python's for what target patterns use (classes, groups, alternation, repeats).
std::optional<std::regex> targets_regex(const LoraSetup& s) {
  if (s.targets_pattern.empty()) return std::nullopt;
  try {
    return std::regex(s.targets_pattern, std::regex::ECMAScript);
  } catch (const std::regex_error& e) {
    throw ConfigError(
        fmt::format("lora.init_from: {}/adapter_config.json's target_modules {} is not a regular "
                    "expression frugal can read ({}); write it as a list of module names",
                    s.init_from, nlohmann::json(s.targets_pattern).dump(), e.what()));
  }
}

struct Adaptable {
  AdaptableProduct product;
  at::Tensor weight;
  std::vector<LoraSiteImpl::Spec> modules;  // every Hugging Face module the weight holds
};

std::vector<Adaptable> adaptable_modules(CausalLmImpl& model) {
  const HfLayout layout = model_family(model.config().arch).hf_layout(model.config());
  std::map<std::string, const HfTensor*> by_name;
  for (const HfTensor& t : layout.tensors) by_name[t.frugal] = &t;
  std::map<std::string, at::Tensor> params;
  for (const auto& [name, p] : model.named_parameter_list()) params.emplace(name, p);
  std::vector<Adaptable> out;
  for (const AdaptableProduct& ap : model.adaptable_products()) {
    const auto t = by_name.find(ap.weight);
    FRUGAL_INTERNAL_ASSERT(t != by_name.end() && params.count(ap.weight), "no Hugging Face name for " + ap.weight);
    Adaptable a{ap, params[ap.weight], {}};
    int64_t row = 0;
    for (size_t k = 0; k < t->second->hf.size(); ++k) {
      const std::string& hf = t->second->hf[k];
      const int64_t rows = t->second->hf.size() == 1 ? params[ap.weight].size(0) : t->second->rows[k];
      const std::string module =
          hf.size() > 7 && hf.compare(hf.size() - 7, 7, ".weight") == 0 ? hf.substr(0, hf.size() - 7) : hf;
      a.modules.push_back({module, row, rows});
      row += rows;
    }
    out.push_back(std::move(a));
  }
  return out;
}

}  // namespace

LoraSetup lora_setup(const LoraConfig& l) {
  LoraSetup s;
  s.rank = l.rank;
  s.alpha = l.alpha;
  s.dora = l.dora;
  s.rslora = l.rslora;
  s.dropout = l.dropout;
  s.targets = freeze_patterns(l.targets);
  s.base_dtype = l.base_dtype == LoraConfig::BaseDtype::kNf4    ? "nf4"
                 : l.base_dtype == LoraConfig::BaseDtype::kFp32 ? "fp32"
                                                                : "bf16";
  if (!l.init_from.empty()) {
    const nlohmann::json j = read_peft_config(l.init_from);
    const std::string file = l.init_from + "/adapter_config.json";
    const LoraConfig defaults;
    auto agree = [&](const char* key, bool differs, const std::string& ours, const std::string& theirs) {
      FRUGAL_CHECK(!differs, ConfigError,
                   fmt::format("lora.{} = {} but lora.init_from's {} has {}: leave lora.{} unset (the adapter's "
                               "value applies) or start new adapters",
                               key, ours, file, theirs, key));
    };
    const int64_t r = j.at("r").get<int64_t>();
    const double alpha = j.value("lora_alpha", 8.0);
    const bool dora = j.value("use_dora", false), rs = j.value("use_rslora", false);
    std::vector<std::string> targets;
    std::string pattern = j["target_modules"].is_string() ? j["target_modules"].get<std::string>() : "";
    if (pattern == "all-linear") {  // PEFT's keyword (every linear layer but the head), not a pattern
      pattern.clear();
      targets = {"all-linear"};
    } else if (pattern.empty()) {
      targets = j["target_modules"].get<std::vector<std::string>>();
    }
    std::sort(targets.begin(), targets.end());
    agree("rank", l.rank != 0 && l.rank != r, std::to_string(l.rank), fmt::format("r = {}", r));
    agree("alpha", l.alpha != defaults.alpha && l.alpha != alpha, fmt::format("{:g}", l.alpha),
          fmt::format("lora_alpha = {:g}", alpha));
    agree("dora", l.dora && !dora, "true", "use_dora = false");
    agree("rslora", l.rslora && !rs, "true", "use_rslora = false");
    auto ours = s.targets;
    std::sort(ours.begin(), ours.end());
    agree("targets", l.targets != defaults.targets && (!pattern.empty() || ours != targets),
          fmt::format("\"{}\"", l.targets),
          fmt::format("target_modules = {}", pattern.empty()
                                                 ? nlohmann::json(targets).dump()
                                                 : nlohmann::json(pattern).dump() + " (a regular expression)"));
    s.rank = r;
    s.alpha = alpha;
    s.dora = dora;
    s.rslora = rs;
    s.targets = targets;
    s.targets_pattern = pattern;
    s.init_from = l.init_from;
  }
  s.scale = s.rslora ? s.alpha / std::sqrt(static_cast<double>(s.rank)) : s.alpha / static_cast<double>(s.rank);
  return s;
}

LoraSetup install_lora(CausalLmImpl& model, const LoraConfig& l) {
  if (!lora_enabled(l)) return {};
  LoraSetup s = lora_setup(l);
  FRUGAL_CHECK(!s.targets.empty() || !s.targets_pattern.empty(), ConfigError,
               "lora.targets is empty: name the products to adapt, or \"all-linear\"");
  const std::vector<Adaptable> adaptable = adaptable_modules(model);
  const bool all = s.targets.size() == 1 && s.targets[0] == "all-linear";
  const std::optional<std::regex> pattern = targets_regex(s);
  std::set<std::string> used, names;
  for (const Adaptable& a : adaptable) {
    std::vector<LoraSiteImpl::Spec> parts;
    for (const LoraSiteImpl::Spec& m : a.modules) {
      names.insert(short_name(m.hf_module));
      bool hit = all || (pattern && std::regex_match(m.hf_module, *pattern));
      for (const std::string& t : s.targets)
        if (targets_module(t, m.hf_module)) hit = true, used.insert(t);
      if (hit) parts.push_back(m);
    }
    if (parts.empty()) continue;
    at::Tensor weight = a.weight;
    auto site = std::make_shared<LoraSiteImpl>(parts, weight, s.rank, s.scale, l.dropout, s.dora);
    a.product.module->register_module("lora", site);
    *a.product.adapters = site;
    s.base_bytes_bf16 += 2 * weight.numel();
    if (l.base_dtype == LoraConfig::BaseDtype::kBf16) {
      torch::NoGradGuard no_grad;
      weight.set_data(weight.detach().to(at::kBFloat16));  // every holder of the tensor sees it
    } else if (l.base_dtype == LoraConfig::BaseDtype::kNf4) {
      site->hold_in_nf4(weight, a.modules);
    }
    s.base_bytes += weight.numel() * static_cast<int64_t>(weight.element_size());
    for (const auto& p : site->named_parameters())
      if (p.key().find("_nf4_") != std::string::npos) s.base_bytes += p.value().nbytes();
    s.adapted_modules += static_cast<int64_t>(parts.size());
  }
  FRUGAL_CHECK(!pattern || s.adapted_modules > 0, ConfigError,
               fmt::format("lora.init_from: {}/adapter_config.json's target_modules {} is a string, which PEFT "
                           "matches as a regular expression against whole module names (such as "
                           "\"model.layers.0.self_attn.q_proj\"); it matches none of this {}. A list names "
                           "modules by their last names: [\"q_proj\", \"v_proj\"]",
                           s.init_from, nlohmann::json(s.targets_pattern).dump(), model.describe()));
  if (!all)
    for (const std::string& t : s.targets)
      FRUGAL_CHECK(used.count(t), ConfigError,
                   fmt::format("lora.targets: \"{}\" names no projection of this {}; its projections are {} (or "
                               "\"all-linear\" for all of them){}",
                               t, model.describe(), fmt::join(names, ", "),
                               t.find_first_of("[]\"'") == std::string::npos
                                   ? ""
                                   : "; give the names separated by commas (q_proj,v_proj) or as a TOML list of "
                                     "quoted strings ([\"q_proj\", \"v_proj\"]; in --set, the whole argument in "
                                     "single quotes)"));
  for (auto& p : model.named_parameters(/*recurse=*/true)) {
    const bool adapter = is_adapter_parameter(p.key());
    if (!adapter) p.value().requires_grad_(false);
    (adapter ? s.trainable_elements : s.frozen_elements) += weight_elements(p.key(), p.value());
  }
  if (!s.init_from.empty()) load_peft_adapter(model, s.init_from);
  return s;
}

bool is_adapter_parameter(const std::string& name) {
  return name.find(".lora.") != std::string::npos && name.find("_nf4_") == std::string::npos;
}

int64_t weight_elements(const std::string& name, const at::Tensor& p) {
  if (p.scalar_type() == at::kByte) return 2 * p.numel();
  return name.find(".lora.") != std::string::npos && name.find("_nf4_") != std::string::npos ? 0 : p.numel();
}

std::vector<std::string> peft_target_modules(CausalLmImpl& model) {
  std::set<std::string> adapted;
  for (const AdaptableProduct& p : model.adaptable_products())
    if (*p.adapters)
      for (const LoraSiteImpl::Part& part : (*p.adapters)->parts()) adapted.insert(part.hf_module);
  // Every adaptable module under each last name, in the model's order.
  std::vector<std::string> order;
  std::map<std::string, std::vector<std::string>> by_short;
  for (const Adaptable& a : adaptable_modules(model))
    for (const LoraSiteImpl::Spec& m : a.modules) {
      auto& modules = by_short[short_name(m.hf_module)];
      if (modules.empty()) order.push_back(short_name(m.hf_module));
      modules.push_back(m.hf_module);
    }
  std::vector<std::string> out;
  for (const std::string& name : order) {
    const auto& modules = by_short[name];
    const auto n = std::count_if(modules.begin(), modules.end(), [&](const auto& m) { return adapted.count(m) > 0; });
    if (n == static_cast<std::ptrdiff_t>(modules.size())) {
      out.push_back(name);  // PEFT's last-name match takes exactly these
      continue;
    }
    for (const std::string& m : modules)
      if (adapted.count(m)) out.push_back(m);  // a full name matches that module alone
  }
  return out;
}

bool has_lora(CausalLmImpl& model) {
  for (const AdaptableProduct& p : model.adaptable_products())
    if (*p.adapters) return true;
  return false;
}

NamedTensors merged_parameter_list(CausalLmImpl& model, const std::map<std::string, at::Tensor>& base) {
  std::map<std::string, std::shared_ptr<LoraSiteImpl>> sites;
  for (const AdaptableProduct& p : model.adaptable_products())
    if (*p.adapters) sites[p.weight] = *p.adapters;
  NamedTensors out;
  for (const auto& [name, p] : model.named_parameter_list()) {
    if (name.find(".lora.") != std::string::npos) continue;
    const auto s = sites.find(name);
    const auto stored = base.find(name);
    out.emplace_back(name, s == sites.end() ? p : s->second->merged(stored == base.end() ? p : stored->second));
  }
  return out;
}

}  // namespace frugal
