/* SPDX-License-Identifier: MIT */
/* RoundPipe's stage split: the ops of one training step in the order they run (the forward of each
 * group 0..L + 1, then the backward from the head down), each with a cost in seconds, cut into
 * contiguous stages for a round-robin pipeline over R GPUs.  Pure C, no StarPU.
 *
 * The pipeline's model (our reading of the seed, which assigns the one stage sequence to the GPUs
 * round-robin and equalises stage times: stage k runs on GPU k mod R, micro-batches follow each
 * other through the stages).  A wave holds m = min(M, R) of the step's M micro-batches; in tick
 * t micro-batch j runs stage t - j, so the GPUs of a tick are distinct and a wave takes S + m - 1
 * ticks; a tick lasts as long as its slowest stage; waves run one after another.  Bounding every
 * tick by the slowest stage of the split (the bottleneck b, each stage's ops plus a fixed cost a
 * stage):
 *     step_s = ceil(M / R) * (S + m - 1) * b
 * For a fixed stage count S that is the bottleneck, which the dynamic program minimises exactly
 * over every split with S stages (O(n^2) per S, O(n^3) in all for n ops: the seed's O(L^3)); the
 * count is then the one whose step_s is least (ties: fewer stages).  More stages shorten b but
 * lengthen the fill and drain; with one GPU and one micro-batch the whole step is one stage.
 *
 * The greedy split beside it is our reading of RoundPipe's public code (enumeration plus greedy
 * packing): for each target count S it packs the ops left to right into a stage while the stage
 * stays within total / S, then prices the stages it made with the same step_s; the best over S
 * wins.  It can be far from the optimum when one op (the LM head) is much heavier than the
 * average: tests/graph/test_split.c gives such a table.
 *
 * An op with `join` set may not end a stage (the next op runs in the same stage): the graph runs
 * the LM head's forward and backward as one task.
 *
 * Use:
 *     struct sdp_split_op ops[n];  // sdp_predict_split_ops (graph/predict_ops.h) or measured
 *     struct sdp_split_conf c = { .ranks = R, .n_micro = M, .stage_s = 0 };
 *     struct sdp_split best, dp, greedy;
 *     sdp_split_best(n, ops, &c, &best, &dp, &greedy);   // dp or greedy may be NULL
 *     ... best.first[s] .. best.first[s + 1] - 1 are stage s's ops ...
 *     sdp_split_free(&best); ...
 * Test: tests/graph/test_split.c (against brute force over every cut). */
#ifndef SDP_SPLIT_H
#define SDP_SPLIT_H

struct sdp_split_op {
    double cost_s; /* the op's time on one GPU for one micro-batch (>= 0) */
    int group;     /* the parameter group: 0 embedding, 1..L layers, L + 1 the head */
    int bwd;       /* 0 forward, 1 backward */
    int join;      /* 1: no stage ends after this op */
};

struct sdp_split_conf {
    int ranks;      /* R, the GPUs (or CPU ranks) of the round-robin, >= 1 */
    int n_micro;    /* M, micro-batches per step, >= 1 */
    double stage_s; /* a stage's fixed cost besides its ops (launch, synchronisation), >= 0 */
};

struct sdp_split {
    int nstages;         /* S */
    int *first;          /* S + 1 entries: stage s holds ops first[s] .. first[s + 1] - 1 */
    double *cost_s;      /* S entries: each stage's ops summed, plus stage_s */
    double bottleneck_s; /* the largest cost_s */
    double step_s;       /* the model above */
};

/** The model's step time for S stages of bottleneck b under c. */
double sdp_split_step_s(const struct sdp_split_conf *c, int nstages, double bottleneck_s);

/** The exact split: least step_s over every cut.  @return 0, -EINVAL (n < 1, a negative or
 * non-finite cost, ranks or n_micro < 1, stage_s < 0; logged), -ENOMEM */
int sdp_split_dp(int n, const struct sdp_split_op *ops, const struct sdp_split_conf *c,
                 struct sdp_split *out);

/** The greedy split (above).  @return as sdp_split_dp */
int sdp_split_greedy(int n, const struct sdp_split_op *ops, const struct sdp_split_conf *c,
                     struct sdp_split *out);

/** Both, and the better of the two in *best (the dynamic program on a tie); dp and greedy may be
 * NULL, else they receive each split (free all three).  @return as sdp_split_dp */
int sdp_split_best(int n, const struct sdp_split_op *ops, const struct sdp_split_conf *c,
                   struct sdp_split *best, struct sdp_split *dp, struct sdp_split *greedy);

/** Fill out (allocated) from cut points: stage s starts at op first[s], first[0] = 0, first[S] = n;
 * costs summed from each stage's last op down, as the dynamic program sums them, so the same
 * split gives the same bits.  @return 0, -ENOMEM */
int sdp_split_from_cuts(int n, const struct sdp_split_op *ops, const struct sdp_split_conf *c,
                        const int *first, int nstages, struct sdp_split *out);

void sdp_split_free(struct sdp_split *s);

#endif
