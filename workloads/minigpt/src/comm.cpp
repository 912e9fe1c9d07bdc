#include "comm.hpp"

#include "error.hpp"

#include <algorithm>
#include <chrono>
#include <string>

namespace minigpt {

double& comm_seconds() {
    static double s = 0;
    return s;
}

namespace {
struct CommTimer {
    std::chrono::steady_clock::time_point t0 = std::chrono::steady_clock::now();
    ~CommTimer() {
        comm_seconds() += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    }
};
void check(int rc, const char* what) {
    if (rc != MPI_SUCCESS)
        throw Error(std::string("MPI call failed: ") + what + " returned " + std::to_string(rc));
}
} // namespace

MpiSession::MpiSession(int& argc, char**& argv) {
    int provided = 0;
    check(MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided), "MPI_Init_thread");
}
MpiSession::~MpiSession() {
    MPI_Finalize();
}

Group Group::world() {
    Group g;
    g.comm_ = std::make_shared<Handle>(MPI_COMM_WORLD, false);
    MPI_Comm_rank(MPI_COMM_WORLD, &g.rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &g.size_);
    return g;
}

Group Group::split(int color, int key) const {
    if (!comm_) return {};
    MPI_Comm c;
    check(MPI_Comm_split(comm_->comm, color, key, &c), "MPI_Comm_split");
    Group g;
    g.comm_ = std::make_shared<Handle>(c, true);
    MPI_Comm_rank(c, &g.rank_);
    MPI_Comm_size(c, &g.size_);
    return g;
}

void Group::alltoall(const float* send, float* recv, std::size_t per_peer) const {
    if (size_ == 1) {
        std::copy(send, send + per_peer, recv);
        return;
    }
    CommTimer t;
    check(MPI_Alltoall(send, static_cast<int>(per_peer), MPI_FLOAT, recv, static_cast<int>(per_peer),
                       MPI_FLOAT, comm_->comm),
          "MPI_Alltoall");
}

void Group::alltoall(const int* send, int* recv, std::size_t per_peer) const {
    if (size_ == 1) {
        std::copy(send, send + per_peer, recv);
        return;
    }
    CommTimer t;
    check(MPI_Alltoall(send, static_cast<int>(per_peer), MPI_INT, recv, static_cast<int>(per_peer), MPI_INT,
                       comm_->comm),
          "MPI_Alltoall");
}

void Group::allreduce_sum(float* buf, std::size_t n) const {
    if (size_ == 1 || n == 0) return;
    CommTimer t;
    check(MPI_Allreduce(MPI_IN_PLACE, buf, static_cast<int>(n), MPI_FLOAT, MPI_SUM, comm_->comm),
          "MPI_Allreduce");
}

void Group::allreduce_sum(double* buf, std::size_t n) const {
    if (size_ == 1 || n == 0) return;
    CommTimer t;
    check(MPI_Allreduce(MPI_IN_PLACE, buf, static_cast<int>(n), MPI_DOUBLE, MPI_SUM, comm_->comm),
          "MPI_Allreduce");
}

long long Group::allreduce_max(long long v) const {
    if (size_ == 1) return v;
    long long out = v;
    check(MPI_Allreduce(&v, &out, 1, MPI_LONG_LONG, MPI_MAX, comm_->comm), "MPI_Allreduce");
    return out;
}

void Group::allgatherv_inplace(float* buf, const std::vector<int>& counts,
                               const std::vector<int>& displs) const {
    if (size_ == 1) return;
    CommTimer t;
    check(MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, counts.data(), displs.data(), MPI_FLOAT,
                         comm_->comm),
          "MPI_Allgatherv");
}

void Group::barrier() const {
    if (size_ > 1) MPI_Barrier(comm_->comm);
}

// ---------------------------------------------------------------------------------------------- GradSync

GradSync::GradSync(ParamStore& ps, const Group& world, const Group& expert_dp, double bucket_mb, bool overlap)
    : ps_(ps), world_(world), expert_dp_(expert_dp), overlap_(overlap) {
    const std::size_t cap = std::max<std::size_t>(1, static_cast<std::size_t>(bucket_mb * 1024 * 1024 / 4));
    // Buckets are cut from the end of each region, because backward produces the last parameters first.
    auto cut = [&](std::size_t begin, std::size_t end, const Group* g) {
        if (g->size() == 1) return;
        for (std::size_t hi = end; hi > begin;) {
            const std::size_t lo = hi - std::min(cap, hi - begin);
            buckets_.push_back({lo, hi, g});
            hi = lo;
        }
    };
    cut(0, ps.replicated_count(), &world_);
    cut(ps.replicated_count(), ps.count(), &expert_dp_);
    param_buckets_.resize(ps.info.size());
    for (std::size_t p = 0; p < ps.info.size(); ++p) {
        const std::size_t lo = ps.info[p].offset, hi = lo + ps.info[p].size();
        for (std::size_t b = 0; b < buckets_.size(); ++b) {
            const std::size_t a = std::max(lo, buckets_[b].begin), z = std::min(hi, buckets_[b].end);
            if (a < z) param_buckets_[p].emplace_back(static_cast<int>(b), z - a);
        }
    }
}

void GradSync::begin_last_backward() {
    active_ = overlap_;
    for (auto& b : buckets_) {
        b.pending = b.end - b.begin;
        b.started = false;
    }
}

void GradSync::start(Bucket& b) {
    CommTimer t;
    b.started = true;
    check(MPI_Iallreduce(MPI_IN_PLACE, ps_.grad.data() + b.begin, static_cast<int>(b.end - b.begin),
                         MPI_FLOAT, MPI_SUM, b.group->comm(), &b.req),
          "MPI_Iallreduce");
}

void GradSync::params_ready(const std::vector<int>& params) {
    if (!active_) return;
    for (int p : params)
        for (auto [b, n] : param_buckets_[p]) {
            buckets_[b].pending -= n;
            if (buckets_[b].pending == 0) start(buckets_[b]);
        }
    // Open MPI's TCP transport progresses non-blocking collectives only inside MPI calls.
    CommTimer t;
    for (auto& b : buckets_)
        if (b.started && b.req != MPI_REQUEST_NULL) {
            int done = 0;
            MPI_Test(&b.req, &done, MPI_STATUS_IGNORE);
        }
}

void GradSync::finish() {
    if (active_) {
        for (auto& b : buckets_)
            if (!b.started) start(b);
        CommTimer t;
        for (auto& b : buckets_)
            check(MPI_Wait(&b.req, MPI_STATUS_IGNORE), "MPI_Wait");
    } else {
        for (auto& b : buckets_)
            b.group->allreduce_sum(ps_.grad.data() + b.begin, b.end - b.begin);
    }
    active_ = false;
}

} // namespace minigpt
