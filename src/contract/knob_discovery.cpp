#include "contract/knob_discovery.hpp"

#include <fmt/core.h>

#include <algorithm>
#include <cctype>
#include <set>

namespace infrarsi::contract {
namespace {

// How the values of an argument are chosen.
enum class Values {
    Number,     // an integer around today's (micro-batch, parallel sizes, workers)
    Vocabulary, // the program's own words, listed in the entry
    Switch // on or off: a flag, or a boolean written as the script writes it (True/False, true/false, 1/0)
};

struct Entry {
    Role role;
    const char* knob;
    // Names as normalised (no leading dashes or +/~, lower case, '-' as '_'); a dotted one ("fsdp.sharding_
    // strategy") matches a key ending in it, a plain one matches the key's last part.
    std::vector<const char*> names;
    Values values;
    std::vector<const char*> vocabulary; // Vocabulary: what the program accepts
    const char* what;
    const char* values_from = ""; // whose vocabulary
    bool short_option = false;    // llm.c's one-dash options: only for its programs
};

// The arguments a tuner changes, by what they mean, and the vocabularies of the frameworks that take them.
// An entry with a vocabulary applies only where the script's value is one of its words (OLMo's and
// torchtitan's activation checkpointing share a name, not their values).
const std::vector<Entry>& entries() {
    static const std::vector<Entry> e{
        {Role::Steps,
         "",
         {"max_iters", "train_iters", "max_steps", "training.steps", "num_train_steps", "iters",
          "max_duration"},
         Values::Number,
         {},
         "the step count"},
        {Role::Steps, "", {"-x"}, Values::Number, {}, "the step count", "", true},
        {Role::Seed, "", {"seed"}, Values::Number, {}, "the seed"},
        {Role::LogInterval,
         "",
         {"log_interval", "log_every", "logging_steps", "print_freq", "log_freq", "log_every_n_steps",
          "metrics.log_freq", "console_log_interval"},
         Values::Number,
         {},
         "how often a step line is printed"},
        {Role::GlobalBatch,
         "",
         {"global_batch_size", "global_train_batch_size"},
         Values::Number,
         {},
         "the global batch"},
        {Role::MicroBatch,
         "micro_batch",
         {"micro_batch_size", "micro_batch", "per_device_train_batch_size", "train_micro_batch_size_per_gpu",
          "device_train_microbatch_size", "batch_size_training", "local_batch_size", "batch_size", "mbs"},
         Values::Number,
         {},
         "the micro-batch per rank"},
        {Role::MicroBatch, "micro_batch", {"-b"}, Values::Number, {}, "the micro-batch per rank", "", true},
        {Role::Accumulation,
         "grad_accum",
         {"gradient_accumulation_steps", "grad_accum", "grad_accum_steps", "accumulate_grad_batches"},
         Values::Number,
         {},
         "gradient accumulation steps"},
        {Role::Recompute,
         "recompute",
         {"recompute_granularity", "activations_checkpoint_granularity"},
         Values::Vocabulary,
         {"full", "selective"},
         "activation recomputation",
         "Megatron-LM's and NeMo's"},
        {Role::Recompute,
         "recompute_method",
         {"recompute_method", "activations_checkpoint_method"},
         Values::Vocabulary,
         {"uniform", "block"},
         "how layers are recomputed",
         "Megatron-LM's and NeMo's"},
        {Role::Recompute,
         "recompute",
         {"activation_checkpoint.mode"},
         Values::Vocabulary,
         {"none", "selective", "full"},
         "activation checkpointing",
         "torchtitan's"},
        {Role::Recompute,
         "recompute",
         {"activation_checkpointing"},
         Values::Vocabulary,
         {"whole_layer", "one_in_two", "one_in_three", "one_in_four", "one_in_eight", "two_in_three",
          "three_in_four", "fine_grained"},
         "activation checkpointing",
         "OLMo's ActivationCheckpointingStrategy"},
        {Role::Recompute,
         "recompute",
         {"gradient_checkpointing", "checkpoint_activations", "recompute_activations",
          "fsdp_activation_checkpointing", "activation_checkpointing", "activations_checkpoint"},
         Values::Switch,
         {},
         "activation recomputation"},
        {Role::Recompute,
         "recompute",
         {"-r"},
         Values::Vocabulary,
         {"0", "1", "2"},
         "activation recomputation (none, GeLU, GeLU and LayerNorm)",
         "llm.c's",
         true},
        {Role::Dtype,
         "dtype",
         {"dtype"},
         Values::Vocabulary,
         {"float32", "bfloat16", "float16"},
         "the compute dtype",
         "nanoGPT's"},
        {Role::Dtype,
         "mixed_precision",
         {"mixed_precision"},
         Values::Vocabulary,
         {"no", "fp16", "bf16"},
         "mixed precision",
         "accelerate's (fp8 needs Transformer Engine or MS-AMP: left out)"},
        {Role::Dtype,
         "precision",
         {"trainer.precision"},
         Values::Vocabulary,
         {"bf16-mixed", "16-mixed", "bf16", "16", "32"},
         "the trainer's precision",
         "NeMo's"},
        {Role::Dtype,
         "precision",
         {"precision"},
         Values::Vocabulary,
         {"bf16-mixed", "16-mixed", "bf16-true", "32-true"},
         "the precision",
         "Lightning's (litgpt)"},
        {Role::Dtype,
         "precision",
         {"precision"},
         Values::Vocabulary,
         {"amp_bf16", "amp_fp16", "fp32"},
         "the precision",
         "OLMo's"},
        {Role::Dtype,
         "fp8_format",
         {"fp8_format"},
         Values::Vocabulary,
         {"e4m3", "hybrid"},
         "the FP8 format",
         "Megatron-LM's"},
        {Role::Dtype,
         "grad_sync_dtype",
         {"grad_sync_dtype"},
         Values::Vocabulary,
         {"fp32", "bf16"},
         "the dtype gradients are reduced in",
         "NeMo's"},
        {Role::Dtype,
         "",
         {"bf16", "fp16", "tf32", "fp8", "pure_bf16", "grad_reduce_in_bf16"},
         Values::Switch,
         {},
         "a precision switch"},
        {Role::ZeroStage,
         "zero_stage",
         {"zero_stage"},
         Values::Vocabulary,
         {"0", "1", "2", "3"},
         "the ZeRO stage",
         "DeepSpeed's"},
        {Role::ZeroStage,
         "zero_stage",
         {"-z"},
         Values::Vocabulary,
         {"0", "1"},
         "the ZeRO stage (2 and 3 fall back to 0)",
         "llm.c's",
         true},
        {Role::ZeroStage,
         "distributed_optimizer",
         {"use_distributed_optimizer"},
         Values::Switch,
         {},
         "optimizer state sharded across data-parallel ranks"},
        {Role::Fsdp,
         "fsdp_sharding",
         {"sharding_strategy", "fsdp_sharding_strategy"},
         Values::Vocabulary,
         {"FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD", "HYBRID_SHARD", "_HYBRID_SHARD_ZERO2"},
         "the FSDP sharding strategy",
         "torch.distributed.fsdp.ShardingStrategy's"},
        {Role::Fsdp, "fsdp", {"fsdp", "enable_fsdp"}, Values::Switch, {}, "FSDP"},
        {Role::Fsdp,
         "fsdp_replicas",
         {"hybrid_sharding_num_model_replicas"},
         Values::Number,
         {},
         "model replicas of hybrid sharding"},
        {Role::TensorParallel,
         "tensor_parallel",
         {"tensor_model_parallel_size", "tensor_parallel_degree", "tp"},
         Values::Number,
         {},
         "tensor parallel size"},
        {Role::PipelineParallel,
         "pipeline_parallel",
         {"pipeline_model_parallel_size", "pipeline_parallel_degree", "pp"},
         Values::Number,
         {},
         "pipeline parallel size"},
        {Role::ContextParallel,
         "context_parallel",
         {"context_parallel_size", "context_parallel_degree", "cp"},
         Values::Number,
         {},
         "context parallel size"},
        {Role::ExpertParallel,
         "expert_parallel",
         {"expert_model_parallel_size", "expert_parallel_degree", "ep"},
         Values::Number,
         {},
         "expert parallel size"},
        {Role::VirtualPipeline,
         "virtual_pipeline",
         {"virtual_pipeline_model_parallel_size"},
         Values::Number,
         {},
         "virtual pipeline stages"},
        {Role::SequenceParallel,
         "sequence_parallel",
         {"sequence_parallel"},
         Values::Switch,
         {},
         "sequence parallelism"},
        {Role::Threads,
         "threads",
         {"threads", "num_threads", "intra_op_threads"},
         Values::Number,
         {},
         "threads per rank"},
        {Role::Workers,
         "data_workers",
         {"num_workers", "dataloader_num_workers"},
         Values::Number,
         {},
         "data loader workers"},
        {Role::Prefetch,
         "prefetch_factor",
         {"prefetch_factor", "dataloader_prefetch_factor"},
         Values::Number,
         {},
         "batches each data loader worker prefetches"},
        {Role::Bucket,
         "ddp_bucket_mb",
         {"ddp_bucket_cap_mb", "bucket_cap_mb"},
         Values::Number,
         {},
         "the DDP gradient bucket size (MB)"},
        {Role::Compile,
         "compile",
         {"compile", "compile.enable", "compile.fullgraph", "torch_compile", "use_torch_compile"},
         Values::Switch,
         {},
         "torch.compile"},
        {Role::Fused,
         "attention_backend",
         {"attention_backend"},
         Values::Vocabulary,
         {"flash", "fused", "unfused", "auto"},
         "the attention kernels",
         "Megatron-LM's AttnBackend (local needs --spec local: left out)"},
        {Role::Fused,
         "",
         {"flash_attention", "use_flash_attn", "fused_loss", "cross_entropy_loss_fusion", "use_fast_kernels",
          "bias_gelu_fusion", "masked_softmax_fusion", "apply_rope_fusion", "use_fused_rmsnorm", "fused_adam",
          "fused", "nvte_fused_attn", "nvte_flash_attn"},
         Values::Switch,
         {},
         "a fused kernel"},
        {Role::Fused,
         "gelu_fusion",
         {"-ge"},
         Values::Vocabulary,
         {"0", "1"},
         "GeLU fusion (2 needs a newer cuBLASLt: left out)",
         "llm.c's",
         true},
        {Role::Overlap,
         "",
         {"overlap_grad_reduce", "overlap_param_gather", "tp_comm_overlap"},
         Values::Switch,
         {},
         "communication overlap"},
        {Role::Memory,
         "empty_cache_level",
         {"empty_unused_memory_level"},
         Values::Vocabulary,
         {"0", "1", "2"},
         "emptying the CUDA cache each step",
         "Megatron-LM's"},
        {Role::Memory, "", {"manual_gc", "fp8_param_gather"}, Values::Switch, {}, "a memory setting"},
    };
    return e;
}

std::string normalise(const std::string& name) {
    std::string n;
    std::size_t i = 0;
    while (i < name.size() && (name[i] == '-' || name[i] == '+' || name[i] == '~'))
        ++i;
    for (; i < name.size(); ++i)
        n += name[i] == '-' ? '_' : static_cast<char>(std::tolower(static_cast<unsigned char>(name[i])));
    return n;
}

bool name_matches(const ProgramArg& a, const char* pattern, bool short_option) {
    if (short_option) return a.style == ArgStyle::Short && a.name == pattern;
    if (a.style == ArgStyle::Short) return false;
    const std::string n = normalise(a.name);
    const std::string p = pattern;
    if (n == p) return true;
    return n.size() > p.size() && n.compare(n.size() - p.size(), p.size(), p) == 0 &&
           n[n.size() - p.size() - 1] == '.';
}

// llm.c's trainers (train_gpt2cu, train_gpt2, train_gpt2fp32cu, ...): the only programs whose one-dash
// options the tables read.
bool llmc_program(const std::string& program) {
    const auto slash = program.rfind('/');
    return program.compare(slash == std::string::npos ? 0 : slash + 1, 10, "train_gpt2") == 0 ||
           program.compare(slash == std::string::npos ? 0 : slash + 1, 10, "train_llama") == 0;
}

const Entry* entry_for(const BatchScript& s, const ProgramArg& a) {
    const bool llmc = llmc_program(s.program);
    for (const auto& e : entries()) {
        if (e.short_option && !llmc) continue;
        for (const char* n : e.names)
            if (name_matches(a, n, e.short_option)) {
                // A vocabulary the value is not in is another framework's: look further.
                if (e.values == Values::Vocabulary && !a.flag &&
                    std::find(e.vocabulary.begin(), e.vocabulary.end(), a.value) == e.vocabulary.end())
                    break;
                return &e;
            }
    }
    return nullptr;
}

bool pow2(long long v) {
    return v >= 1 && (v & (v - 1)) == 0;
}

// A boolean as the script writes it, and its opposite in the same spelling.
std::optional<std::string> opposite(const std::string& v) {
    static const std::vector<std::pair<const char*, const char*>> pairs{
        {"True", "False"}, {"true", "false"}, {"1", "0"}, {"yes", "no"}, {"on", "off"}, {"TRUE", "FALSE"}};
    for (const auto& [t, f] : pairs) {
        if (v == t) return std::string(f);
        if (v == f) return std::string(t);
    }
    return std::nullopt;
}

std::string knob_name_of(const Entry& e, const ProgramArg& a) {
    if (*e.knob) return e.knob;
    std::string n = normalise(a.name);
    const auto dot = n.rfind('.');
    if (dot != std::string::npos) n = n.substr(dot + 1);
    std::string out;
    for (char c : n)
        out += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
    return out;
}

// The argv a trial appends to set the argument: as the script writes it (`--name=value`, `-b value`,
// `key=value`; a Hydra key the script adds with `+` is overridden with `++`).
std::vector<std::string> delivery(const ProgramArg& a) {
    switch (a.style) {
    case ArgStyle::Short:
        return {a.name, "{}"};
    case ArgStyle::KeyValue:
        if (a.name.rfind('+', 0) == 0) return {"++" + a.name.substr(a.name.find_first_not_of('+')) + "={}"};
        return {a.name + "={}"};
    case ArgStyle::Long:
        break;
    }
    return {a.name + "={}"};
}

std::string shown(const ProgramArg& a) {
    if (a.flag) return a.name;
    return a.style == ArgStyle::KeyValue ? a.name + "=" + a.value : a.name + " " + a.value;
}

// The environment variables a performance tuner changes, with the values worth trying besides the script's
// (a "default" choice leaves the variable out: the library decides). Names, not hardware settings: the
// interface, the HCA, debugging and plugins are the site's, not a knob.
struct EnvEntry {
    const char* name;
    Role role;
    std::vector<const char*> also; // further values worth trying
    const char* preset = "";       // the knob preset that searches it (docs/contract.md)
};
const std::vector<EnvEntry>& env_entries() {
    static const std::vector<EnvEntry> e{
        {"NCCL_ALGO", Role::Communication, {"Ring", "Tree"}, "nccl-algo"},
        {"NCCL_PROTO", Role::Communication, {"Simple", "LL"}, "nccl-algo"},
        {"NCCL_MIN_NCHANNELS", Role::Communication, {}, "nccl-channels"},
        {"NCCL_MAX_NCHANNELS", Role::Communication, {}, "nccl-channels"},
        {"NCCL_BUFFSIZE", Role::Communication, {}, "nccl-buffers"},
        {"NCCL_NET_GDR_LEVEL", Role::Communication, {"LOC", "PIX", "PXB", "PHB", "SYS"}, "nccl-net"},
        {"NCCL_P2P_LEVEL", Role::Communication, {"LOC", "PIX", "PXB", "PHB", "SYS"}},
        {"NCCL_IB_DISABLE", Role::Communication, {"0", "1"}},
        {"NCCL_NVLS_ENABLE", Role::Communication, {"0", "1"}},
        {"NCCL_CROSS_NIC", Role::Communication, {"0", "1", "2"}},
        {"NCCL_P2P_DISABLE", Role::Communication, {"0", "1"}},
        {"NCCL_SHM_DISABLE", Role::Communication, {"0", "1"}},
        {"NCCL_P2P_NET_CHUNKSIZE", Role::Communication, {}},
        {"NCCL_P2P_PCI_CHUNKSIZE", Role::Communication, {}},
        {"NCCL_P2P_NVL_CHUNKSIZE", Role::Communication, {}},
        {"NCCL_NSOCKS_PERTHREAD", Role::Communication, {}},
        {"NCCL_SOCKET_NTHREADS", Role::Communication, {}},
        {"NCCL_IB_QPS_PER_CONNECTION", Role::Communication, {}},
        {"NCCL_NCHANNELS_PER_NET_PEER", Role::Communication, {}},
        {"NCCL_MIN_CTAS", Role::Communication, {}},
        {"NCCL_MAX_CTAS", Role::Communication, {}},
        {"NCCL_CUMEM_ENABLE", Role::Communication, {"0", "1"}},
        {"TORCH_NCCL_AVOID_RECORD_STREAMS", Role::Communication, {"0", "1"}},
        {"PYTORCH_CUDA_ALLOC_CONF", Role::Memory, {"expandable_segments:True"}},
        {"PYTORCH_ALLOC_CONF", Role::Memory, {"expandable_segments:True"}},
        {"NVTE_FUSED_ATTN", Role::Fused, {"0", "1"}},
        {"NVTE_FLASH_ATTN", Role::Fused, {"0", "1"}},
    };
    return e;
}

std::string lower(std::string s) {
    for (auto& c : s)
        c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return s;
}

} // namespace

const ProgramArg* argument_with_role(const BatchScript& s, Role r) {
    for (const auto& a : s.program_args)
        if (const Entry* e = entry_for(s, a); e && e->role == r) return &a;
    return nullptr;
}

KnobDiscovery discover_knobs(const BatchScript& s, const DiscoveryContext& ctx) {
    KnobDiscovery out;
    std::set<std::string> names;
    auto unique_name = [&](std::string n) {
        const std::string base = n;
        for (int k = 2; names.count(n); ++k)
            n = fmt::format("{}_{}", base, k);
        names.insert(n);
        return n;
    };
    const ProgramArg* mb = nullptr;
    const ProgramArg* acc = nullptr;
    const ProgramArg* pp = nullptr;
    for (const auto& a : s.program_args)
        if (const Entry* e = entry_for(s, a)) {
            if (e->role == Role::MicroBatch && !mb) mb = &a;
            if (e->role == Role::Accumulation && !acc) acc = &a;
            if (e->role == Role::PipelineParallel && !pp) pp = &a;
        }
    const long long mb_v = mb ? plain_integer(mb->value).value_or(0) : 0;
    const long long acc_v = acc ? plain_integer(acc->value).value_or(0) : 0;
    const long long local_batch = std::max<long long>(1, mb_v) * std::max<long long>(1, acc_v);
    std::set<std::string> env_used; // each variable a knob sets, once
    std::set<std::string> seen; // one knob per argument name (the last one the program reads wins: the first
                                // written is the one a reader sees; both are the same knob)

    // A run on CPUs (--device=cpu): no precision to tune (bfloat16 on a CPU is emulated, float16 refused).
    const bool cpu = std::any_of(s.program_args.begin(), s.program_args.end(), [](const ProgramArg& a) {
        return normalise(a.name) == "device" && a.value == "cpu";
    });
    for (const auto& a : s.program_args) {
        const Entry* e = entry_for(s, a);
        if (!e || e->role <= Role::GlobalBatch) continue;
        if (cpu && e->role == Role::Dtype) continue;
        if (!seen.insert(normalise(a.name)).second) continue;
        SuggestedKnob k;
        k.role = e->role;
        k.what = e->what;
        k.values_from = e->values_from;
        k.from = fmt::format("{} (line {})", shown(a), s.launch_line);
        // A value Slurm gives ($SLURM_CPUS_PER_TASK): what the #SBATCH lines ask for.
        auto v = plain_integer(a.value);
        if (!v && a.value.find("SLURM_CPUS_PER_TASK") != std::string::npos) v = ctx.cpus_per_task;
        switch (e->values) {
        case Values::Number: {
            if (a.flag || !v) continue; // a value the script computes ($((...)), null): nothing to start from
            long long lo = 1, hi = std::max<long long>(2 * *v, 2);
            switch (e->role) {
            case Role::MicroBatch:
                if (*v < 1) continue;
                hi = acc_v >= 1 ? local_batch : std::max<long long>(2 * *v, 2);
                break;
            case Role::Accumulation:
                if (*v < 1 || mb_v < 1) continue; // alone it changes the global batch: no knob
                hi = local_batch;
                break;
            case Role::Threads:
                if (*v < 1) continue;
                hi = std::max<long long>(*v, ctx.cpus_per_task.value_or(*v));
                break;
            case Role::Workers:
                lo = 0;
                hi = std::max<long long>(2 * *v, 4);
                break;
            case Role::Prefetch:
                if (*v < 1) continue;
                hi = std::max<long long>(2 * *v, 4);
                break;
            case Role::Bucket:
                if (*v < 1) continue;
                hi = 4 * *v;
                break;
            case Role::TensorParallel:
            case Role::PipelineParallel:
            case Role::ContextParallel:
            case Role::ExpertParallel:
            case Role::Fsdp:
                // Powers of two: their products divide a power-of-two GPU count, and the heads, layers and
                // experts a model has (a CHECK names the divisibility the program asserts).
                if (*v < 1 || !pow2(*v)) continue;
                hi = std::max<long long>(ctx.gpus.value_or(2 * *v), *v);
                if (e->role == Role::TensorParallel && ctx.gpus_per_node) // its all-reduces need NVLink
                    hi = std::max<long long>(std::min(hi, *ctx.gpus_per_node), *v);
                break;
            case Role::VirtualPipeline:
                if (*v < 2) continue;
                lo = hi = *v; // interleaving must divide the layers per stage: today's or none
                break;
            default:
                if (*v < 1) continue;
                break;
            }
            k.kind = pow2(*v) && pow2(std::max<long long>(lo, 1)) && pow2(hi) && lo >= 1 &&
                             e->role != Role::Workers && e->role != Role::VirtualPipeline
                         ? SuggestedKind::Pow2
                         : SuggestedKind::Integer;
            if (e->role == Role::VirtualPipeline) {
                k.kind = SuggestedKind::Choice; // today's, or none (null) as NeMo writes it
                if (a.style != ArgStyle::KeyValue) continue;
                k.values = {a.value, "null"};
                k.baseline = a.value;
                k.values_from = "NeMo's (null: no interleaving)";
            }
            k.min = lo;
            k.max = hi;
            k.baseline_number = *v;
            break;
        }
        case Values::Vocabulary: {
            if (a.flag) continue;
            k.kind = SuggestedKind::Choice;
            k.values.push_back(a.value);
            for (const char* w : e->vocabulary)
                if (a.value != w) k.values.emplace_back(w);
            // Megatron-DeepSpeed's pipeline engine takes ZeRO stage 0 or 1 only.
            if (e->role == Role::ZeroStage && pp && plain_integer(pp->value).value_or(1) > 1)
                k.values.erase(std::remove_if(k.values.begin(), k.values.end(),
                                              [](const std::string& x) { return x == "2" || x == "3"; }),
                               k.values.end());
            k.baseline = a.value;
            break;
        }
        case Values::Switch: {
            if (a.flag) {
                if (a.style != ArgStyle::Long) continue;
                k.kind = SuggestedKind::Flag;
                k.baseline = "true";
                k.arg = {a.name};
                k.edits.push_back(fmt::format("take {} out of line {}: a trial adds it when the knob is true "
                                              "(it cannot take away what the script passes)",
                                              a.name, s.launch_line));
            } else if (const auto o = opposite(a.value)) {
                k.kind = SuggestedKind::Choice;
                k.values = {a.value, *o};
                k.baseline = a.value;
                k.values_from = "the script's own spelling";
            } else if (e->role == Role::Fsdp && normalise(a.name) == "fsdp") {
                // The HF Trainer's --fsdp "full_shard auto_wrap offload": the sharding word varied, the rest
                // kept; and offload dropped (it trades speed for memory).
                static const std::vector<const char*> sharding{"full_shard", "shard_grad_op", "hybrid_shard",
                                                               "hybrid_shard_zero2"};
                std::vector<std::string> words;
                std::string word;
                for (char c : a.value + " ") {
                    if (c == ' ') {
                        if (!word.empty()) words.push_back(word);
                        word.clear();
                    } else {
                        word += c;
                    }
                }
                const auto at = std::find_if(words.begin(), words.end(), [&](const std::string& w) {
                    return std::find(sharding.begin(), sharding.end(), w) != sharding.end();
                });
                if (at == words.end()) continue;
                k.kind = SuggestedKind::Choice;
                k.values.push_back(a.value);
                auto join = [](const std::vector<std::string>& ws) {
                    std::string t;
                    for (const auto& w : ws)
                        t += (t.empty() ? "" : " ") + w;
                    return t;
                };
                for (const char* w : sharding) {
                    if (*at == w) continue;
                    auto other = words;
                    other[static_cast<std::size_t>(at - words.begin())] = w;
                    k.values.push_back(join(other));
                }
                if (auto off = std::find(words.begin(), words.end(), "offload"); off != words.end()) {
                    auto other = words;
                    other.erase(other.begin() + (off - words.begin()));
                    k.values.push_back(join(other));
                }
                k.baseline = a.value;
                k.values_from = "the HF Trainer's --fsdp options";
            } else {
                continue;
            }
            break;
        }
        }
        k.name = unique_name(knob_name_of(*e, a));
        if (k.arg.empty()) {
            if (!a.var.empty() && !env_used.insert(a.var).second) continue; // one knob a variable
            if (!a.var.empty()) {
                // The value comes from a variable the script assigns: the knob sets the variable.
                k.env = a.var;
                const auto it = s.variables.find(a.var);
                if (it != s.variables.end() && !it->second.from_environment)
                    k.edits.push_back(
                        fmt::format("line {}: write {}=${{{}:-{}}} so that the trial's value of {} "
                                    "reaches the launch",
                                    it->second.line, a.var, a.var, it->second.value, a.var));
            } else {
                k.arg = delivery(a);
                if (a.style == ArgStyle::KeyValue)
                    k.edits.push_back(fmt::format("a trial appends {}=...: the program must take the last "
                                                  "value of a key (Hydra and OmegaConf dot-lists do)",
                                                  a.name));
            }
        }
        if (e->role == Role::TensorParallel || e->role == Role::PipelineParallel ||
            e->role == Role::ContextParallel)
            out.parallel_factors.push_back(k.name);
        out.knobs.push_back(std::move(k));
    }

    // The script's exports: performance variables, each a knob on the variable.
    std::set<std::string> presets;
    for (const auto& entry : s.variables) {
        const std::string& name = entry.first; // (a structured binding cannot be captured by clang's lambdas)
        const ScriptVariable& var = entry.second;
        if (!var.exported) continue;
        if (name == "OMP_NUM_THREADS") {
            std::optional<long long> v = plain_integer(var.value);
            if (!v && var.value.find("SLURM_CPUS_PER_TASK") != std::string::npos) v = ctx.cpus_per_task;
            if (!v || *v < 1 || !env_used.insert(name).second) continue;
            SuggestedKnob k;
            k.role = Role::Threads;
            k.name = unique_name("omp_threads");
            k.kind = SuggestedKind::Integer;
            k.min = 1;
            k.max = std::max<long long>(*v, ctx.cpus_per_task.value_or(*v));
            k.baseline_number = *v;
            k.env = name;
            k.what = "OpenMP threads per rank";
            k.from = fmt::format("{}={} (line {})", name, var.value, var.line);
            if (!var.from_environment)
                k.edits.push_back(fmt::format("line {}: write {}=${{{}:-{}}}: the script's {} would override "
                                              "the trial's",
                                              var.line, name, name, var.value, name));
            out.knobs.push_back(std::move(k));
            continue;
        }
        const auto it = std::find_if(env_entries().begin(), env_entries().end(),
                                     [&](const EnvEntry& e) { return name == e.name; });
        if (it == env_entries().end() || var.value.empty() || var.value.find('$') != std::string::npos ||
            !env_used.insert(name).second)
            continue;
        SuggestedKnob k;
        k.role = it->role;
        k.name = unique_name(lower(name));
        k.kind = SuggestedKind::Choice;
        k.values = {var.value};
        for (const char* w : it->also)
            if (var.value != w) k.values.emplace_back(w);
        k.values.emplace_back("default");
        k.unset = "default";
        k.baseline = var.value;
        k.env = name;
        k.what = it->role == Role::Communication ? "a communication setting" : "a library setting";
        k.values_from = "the script's value, the library's default (unset) and the values worth trying";
        k.from = fmt::format("{}={} (line {})", name, var.value, var.line);
        if (!var.from_environment)
            k.edits.push_back(
                fmt::format("line {}: remove the script's {}={}: the knob sets it (its baseline is "
                            "that value; \"default\" leaves it unset)",
                            var.line, name, var.value));
        if (*it->preset) presets.insert(it->preset);
        out.knobs.push_back(std::move(k));
    }
    out.presets.assign(presets.begin(), presets.end());
    return out;
}

} // namespace infrarsi::contract
