#include "config.hpp"

#include "error.hpp"

#include <CLI/CLI.hpp>
#include <map>

namespace minigpt {

std::string to_string(Recompute r) {
    switch (r) {
    case Recompute::None:
        return "none";
    case Recompute::Selective:
        return "selective";
    case Recompute::Full:
        return "full";
    }
    return "?";
}

bool parse_config(int argc, char** argv, Config& cfg) {
    CLI::App app{"minigpt: reference GPT trainer (dense and MoE) for InfraRSI"};
    app.option_defaults()->always_capture_default();
    auto& m = cfg.model;
    std::string model = m.moe ? "moe" : "dense";
    std::string recompute = to_string(cfg.recompute);
    std::string norm = "rms";
    int overlap = cfg.overlap, zero1 = cfg.zero1;
    // CLI11 gives a flag precedence over its environment variable, which is the documented rule.
    app.add_option("--model", model, "dense|moe")
        ->envname("MINIGPT_MODEL")
        ->check(CLI::IsMember({"dense", "moe"}));
    app.add_option("--steps", cfg.steps, "training steps")
        ->envname("MINIGPT_STEPS")
        ->check(CLI::PositiveNumber);
    app.add_option("--seed", cfg.seed, "seed for init and data order")->envname("MINIGPT_SEED");
    app.add_option("--micro-batch", cfg.micro_batch, "sequences per micro-batch per rank")
        ->envname("MINIGPT_MICRO_BATCH")
        ->check(CLI::PositiveNumber);
    app.add_option("--grad-accum", cfg.grad_accum, "micro-batches per step")
        ->envname("MINIGPT_GRAD_ACCUM")
        ->check(CLI::PositiveNumber);
    app.add_option("--global-batch", cfg.global_batch, "sequences per step; must equal micro*accum*dp")
        ->envname("MINIGPT_GLOBAL_BATCH");
    app.add_option("--recompute", recompute, "activation recompute: none|selective|full")
        ->envname("MINIGPT_RECOMPUTE")
        ->check(CLI::IsMember({"none", "selective", "full"}));
    app.add_option("--threads", cfg.threads, "threads per rank (Eigen/OpenMP)")
        ->envname("MINIGPT_THREADS")
        ->check(CLI::PositiveNumber);
    app.add_option("--ranks-per-node", cfg.ranks_per_node, "MPI ranks per node (launcher; memory estimate)")
        ->envname("MINIGPT_RANKS_PER_NODE")
        ->check(CLI::PositiveNumber);
    app.add_option("--nodes", cfg.nodes, "nodes (memory estimate only)")
        ->envname("MINIGPT_NODES")
        ->check(CLI::PositiveNumber);
    app.add_option("--bucket-mb", cfg.bucket_mb, "gradient all-reduce bucket size in MiB")
        ->envname("MINIGPT_BUCKET_MB")
        ->check(CLI::PositiveNumber);
    app.add_option("--overlap", overlap, "overlap all-reduce with backward (0|1)")
        ->envname("MINIGPT_OVERLAP")
        ->check(CLI::Range(0, 1));
    app.add_option("--zero1", zero1, "shard optimizer states over data-parallel ranks (0|1)")
        ->envname("MINIGPT_ZERO1")
        ->check(CLI::Range(0, 1));
    app.add_option("--capacity-factor", m.capacity_factor, "MoE expert capacity factor")
        ->envname("MINIGPT_CAPACITY_FACTOR")
        ->check(CLI::PositiveNumber);
    app.add_option("--ep-size", cfg.ep_size, "MoE expert-parallel group size")
        ->envname("MINIGPT_EP_SIZE")
        ->check(CLI::PositiveNumber);
    app.add_option("--layers", m.n_layers)->envname("MINIGPT_LAYERS")->check(CLI::PositiveNumber);
    app.add_option("--d-model", m.d_model)->envname("MINIGPT_D_MODEL")->check(CLI::PositiveNumber);
    app.add_option("--heads", m.n_heads)->envname("MINIGPT_HEADS")->check(CLI::PositiveNumber);
    app.add_option("--seq-len", m.seq_len)->envname("MINIGPT_SEQ_LEN")->check(CLI::PositiveNumber);
    app.add_option("--vocab", m.vocab)->envname("MINIGPT_VOCAB")->check(CLI::Range(8, 1 << 20));
    app.add_option("--d-ff", m.d_ff, "dense MLP width (0: 4*d_model)")->envname("MINIGPT_D_FF");
    app.add_option("--norm", norm, "rms|layer")
        ->envname("MINIGPT_NORM")
        ->check(CLI::IsMember({"rms", "layer"}));
    app.add_option("--experts", m.experts)->envname("MINIGPT_EXPERTS")->check(CLI::PositiveNumber);
    app.add_option("--top-k", m.top_k)->envname("MINIGPT_TOP_K")->check(CLI::PositiveNumber);
    app.add_option("--expert-ff", m.expert_ff, "expert MLP width (0: 2*d_model)")
        ->envname("MINIGPT_EXPERT_FF");
    app.add_option("--aux-coef", m.aux_coef, "load-balancing loss weight")->envname("MINIGPT_AUX_COEF");
    app.add_option("--lr", cfg.lr)->envname("MINIGPT_LR");
    app.add_option("--warmup-steps", cfg.warmup_steps, "learning-rate warm-up steps")
        ->envname("MINIGPT_WARMUP_STEPS");
    app.add_option("--timing-warmup", cfg.timing_warmup, "steps left out of the median step time")
        ->envname("MINIGPT_TIMING_WARMUP");
    app.add_option("--peak-gflops", cfg.peak_gflops, "declared peak GFLOP/s per node (0: GEMM probe)")
        ->envname("MINIGPT_PEAK_GFLOPS");
    app.add_flag("--estimate-memory", cfg.estimate_memory,
                 "print the analytic peak-memory estimate and exit");
    try {
        app.parse(argc, argv);
    } catch (const CLI::CallForHelp& e) {
        app.exit(e);
        return false;
    } catch (const CLI::ParseError& e) {
        throw Error(std::string("bad arguments: ") + e.what() + " (see minigpt --help)");
    }
    m.moe = model == "moe";
    m.norm = norm == "layer" ? NormKind::Layer : NormKind::Rms;
    static const std::map<std::string, Recompute> kRecompute = {
        {"none", Recompute::None}, {"selective", Recompute::Selective}, {"full", Recompute::Full}};
    cfg.recompute = kRecompute.at(recompute);
    cfg.overlap = overlap != 0;
    cfg.zero1 = zero1 != 0;
    return true;
}

void Config::validate(int dp_size) const {
    const auto& m = model;
    if (m.d_model % m.n_heads != 0)
        throw Error("d_model " + std::to_string(m.d_model) + " is not divisible by heads " +
                    std::to_string(m.n_heads));
    if (global_batch > 0 && micro_batch * grad_accum * dp_size != global_batch)
        throw Error("batch mismatch: micro_batch (" + std::to_string(micro_batch) + ") x grad_accum (" +
                    std::to_string(grad_accum) + ") x dp_size (" + std::to_string(dp_size) + ") = " +
                    std::to_string(micro_batch * grad_accum * dp_size) + ", but MINIGPT_GLOBAL_BATCH is " +
                    std::to_string(global_batch) + "; pick micro_batch and grad_accum whose product is " +
                    std::to_string(global_batch) + "/" + std::to_string(dp_size));
    if (m.moe) {
        if (m.top_k > m.experts) throw Error("top_k " + std::to_string(m.top_k) + " exceeds experts");
        if (dp_size % ep_size != 0)
            throw Error("ep_size " + std::to_string(ep_size) + " does not divide the " +
                        std::to_string(dp_size) + " ranks");
        if (m.experts % ep_size != 0)
            throw Error("ep_size " + std::to_string(ep_size) + " does not divide experts " +
                        std::to_string(m.experts));
    } else if (ep_size != 1) {
        throw Error("ep_size " + std::to_string(ep_size) + " needs --model moe");
    }
}

nlohmann::json Config::to_json() const {
    const auto& m = model;
    return {{"model", m.moe ? "moe" : "dense"},
            {"vocab", m.vocab},
            {"d_model", m.d_model},
            {"layers", m.n_layers},
            {"heads", m.n_heads},
            {"seq_len", m.seq_len},
            {"d_ff", m.ffn()},
            {"norm", m.norm == NormKind::Rms ? "rms" : "layer"},
            {"experts", m.moe ? m.experts : 0},
            {"top_k", m.moe ? m.top_k : 0},
            {"expert_ff", m.moe ? m.eff() : 0},
            {"capacity_factor", m.capacity_factor},
            {"steps", steps},
            {"seed", seed},
            {"micro_batch", micro_batch},
            {"grad_accum", grad_accum},
            {"global_batch", global_batch},
            {"recompute", to_string(recompute)},
            {"threads", threads},
            {"ranks_per_node", ranks_per_node},
            {"bucket_mb", bucket_mb},
            {"overlap", overlap ? 1 : 0},
            {"zero1", zero1 ? 1 : 0},
            {"ep_size", ep_size},
            {"lr", lr}};
}

} // namespace minigpt
