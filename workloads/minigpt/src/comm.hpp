#pragma once
// MPI behind a small RAII wrapper. A default-constructed Group is a single process and never calls MPI, so
// the layers and their unit tests run without mpirun. Every MPI call adds its wall time to comm_seconds(),
// which is the `comm_s` phase of the step line.
#include "tensor.hpp"

#include <memory>
#include <mpi.h>
#include <vector>

namespace minigpt {

double& comm_seconds();

// MPI_Init_thread / MPI_Finalize as a scope.
class MpiSession {
  public:
    MpiSession(int& argc, char**& argv);
    ~MpiSession();
    MpiSession(const MpiSession&) = delete;
    MpiSession& operator=(const MpiSession&) = delete;
};

class Group {
  public:
    Group() = default;
    static Group world();
    Group split(int color, int key) const;
    int rank() const { return rank_; }
    int size() const { return size_; }
    MPI_Comm comm() const { return comm_ ? comm_->comm : MPI_COMM_SELF; }

    // Equal-size chunks: chunk p of send goes to rank p, chunk p of recv comes from rank p.
    void alltoall(const float* send, float* recv, std::size_t per_peer) const;
    void alltoall(const int* send, int* recv, std::size_t per_peer) const;
    void allreduce_sum(float* buf, std::size_t n) const;
    void allreduce_sum(double* buf, std::size_t n) const;
    long long allreduce_max(long long v) const;
    // Gathers the shards [displs[r], displs[r]+counts[r]) of buf from every rank r, in place.
    void allgatherv_inplace(float* buf, const std::vector<int>& counts, const std::vector<int>& displs) const;
    void barrier() const;

  private:
    struct Handle {
        MPI_Comm comm = MPI_COMM_NULL;
        bool owned = false; // split communicators are freed with the last copy; MPI_COMM_WORLD is not
        Handle(MPI_Comm c, bool o) : comm(c), owned(o) {}
        Handle(const Handle&) = delete;
        Handle& operator=(const Handle&) = delete;
        ~Handle() {
            if (owned) MPI_Comm_free(&comm);
        }
    };
    std::shared_ptr<Handle> comm_;
    int rank_ = 0, size_ = 1;
};

// Gradient all-reduce over contiguous buckets of the flat gradient buffer (Li et al. 2020, "PyTorch
// Distributed", section 3.2). With overlap, a bucket's MPI_Iallreduce starts as soon as backward has produced
// all of its gradients and is progressed with MPI_Test between layers; otherwise every bucket is reduced with
// a blocking MPI_Allreduce after backward.
class GradSync {
  public:
    GradSync(ParamStore& ps, const Group& world, const Group& expert_dp, double bucket_mb, bool overlap);
    // Call once per step before the last micro-batch's backward.
    void begin_last_backward();
    // Backward has finished the gradients of these parameters (for this step).
    void params_ready(const std::vector<int>& params);
    // Completes all reductions; afterwards every rank holds the summed gradients.
    void finish();
    std::size_t buckets() const { return buckets_.size(); }

  private:
    struct Bucket {
        std::size_t begin, end;
        const Group* group;
        std::size_t pending = 0;
        bool started = false;
        MPI_Request req = MPI_REQUEST_NULL;
    };
    void start(Bucket& b);
    ParamStore& ps_;
    Group world_, expert_dp_;
    bool overlap_;
    bool active_ = false;
    std::vector<Bucket> buckets_;
    std::vector<std::vector<std::pair<int, std::size_t>>> param_buckets_; // param -> (bucket, floats in it)
};

} // namespace minigpt
