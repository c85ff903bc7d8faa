// model.h: GPT-2's forward and backward passes, written once for both trainers.
//
// Contract. The including trainer defines, before including this header, its GPT2 struct
// (with at least GPT2Config cfg; Activations acts; const int *dev_inputs, *dev_targets;
// and `kern`, its kernels' per-run context, of whatever type its kernels take) and these
// kernels, each taking that context first (k), with exactly these signatures and the shapes
// their comments in train_gpt_cpu.c give (the CPU runs them with OpenMP and OpenBLAS, the GPU
// launches them on the context's stream):
//   encoder_forward(k, out, inp, wte, wpe, B, T, C)       encoder_backward(k, dwte, dwpe, dout, inp, B, T, C)
//   layernorm_forward(k, out, mean, rstd, inp, w, b, N, C)
//   layernorm_backward(k, dinp+=, dw+=, db+=, dout, inp, w, mean, rstd, N, C)
//   matmul_forward(k, out, inp, w, w16, bias, N, C, OC)   matmul_backward(k, dinp, dw+=, dbias+=, dout, inp, w, w16, N, C, OC)
//   attention_forward(k, out, att, qkv, B, T, C, NH)      attention_backward(k, dqkv, att, dout, qkv, out, B, T, C, NH)
//   gelu_forward(k, out, inp, n)                          gelu_backward(k, dinp, inp, dout, n)
//   matmul_backward_gelu(k, dinp, dw+=, dbias+=, dout, inp, w, w16, pre, N, C, OC): matmul_backward, then
//     dinp = gelu'(pre) * dinp (N*C): the MLP's two backward steps as one call, which a trainer may fuse
//   residual_forward(k, out, a, b, n)                     zero_fill(k, p, n)
//   and, only where the trainer defines GPT2_FUSED_RESIDUAL_LN (the GPU's -DGPU_FUSED_RESIDUAL_LN build):
//   residual_layernorm_forward(k, res, out, mean, rstd, a, b, w, bias, N, C): res = a + b, then
//     layernorm_forward(k, out, mean, rstd, res, w, bias, N, C) of res as stored, as one call, with
//     the bits of those two calls (the trainer's kernels round as they store: gpt2_act_rounded of
//     the sum follows its LayerNorm there). The passes fuse both residual adds of a layer with the
//     LayerNorm that reads the sum: residual2 with ln2, and residual3 (the layer's output) with the
//     next layer's ln1, or after the last layer with the final LayerNorm (lnf). A layer's forward
//     then ends at its MLP projection (in dbtc) and the next call adds its output, so with it
//     gpt2_layer_store(m, l) comes after layer l + 1's first kernel (the last layer's, after the
//     final LayerNorm), and a full recompute's gpt2_layer_recomputed(m, l) before layer l + 1's
//     recompute writes layer l's output. Without it (the CPU trainer) every call runs apart, in
//     the order above.
//   upload_batch(m, inputs, targets, N): sets m->dev_inputs / dev_targets (the GPU copies)
//   classifier_loss(m, N, dloss) -> mean loss: the fused softmax + cross-entropy (+ gradient)
// (w16: the weight's 16-bit copy from UnitParams.x16, or NULL). Every tensor argument is a
// GPT2_FLOATX * (gpt2.h: float on the CPU, the GPU's compiled storage type) except the
// LayerNorm statistics (mean, rstd) and the losses, always float *. And the storage hooks, which
// say where the kernels find a unit's parameters and gradients and a layer's activations:
//   gpt2_unit_params(m, u, next) -> UnitParams      (next: the unit needed after this one)
//   gpt2_unit_grads(m, u) -> GPT2_FLOATX *          where the backward accumulates unit u's gradient
//   gpt2_unit_grads_done(m, u)                      the backward is done with it
//   gpt2_backward_done(m)                           ... and with every unit
//   gpt2_layer_acts_forward(m, l, B, T) -> LayerActs, gpt2_layer_store(m, l, B, T): layer l's
//     activations to compute the forward into, and the forward is done with them
//   gpt2_act_rounded(m, x, l, i, B, T): the kernel that produced per-layer activation i (A_*) of
//     layer l (in its view x) is done, and later kernels will read it: a trainer whose kernels compute
//     wider than its storage rounds it to the storage type here (and may store it), so that every
//     later read, in the forward, in a recompute or in the backward, sees the stored value. (The
//     attention's probabilities, which no later kernel of the forward reads, are rounded by
//     gpt2_layer_store and gpt2_layer_recomputed.)
//   gpt2_layers_output(m, B, T) -> the last layer's output (the final LayerNorm's input), where
//     the forward left it; the backward reads it before it recomputes any layer
//   gpt2_layer_acts_recompute(m, l, B, T) -> LayerActs, gpt2_layer_recomputed(m, l, B, T): where
//     the backward recomputes layer l (what the forward kept for it, and its input, in place),
//     and the recompute is done
//   gpt2_layer_acts_backward(m, l, B, T) -> LayerActs: layer l's activations for its backward
//   gpt2_trace(m) -> Trace *: the rank's timeline (core/trace.h), or NULL; the passes record a
//     span for each unit's forward and backward ("forward"/"backward"; the tied LM head and
//     the loss as "lm_head"; a recompute as "recompute", inside its layer's backward or
//     before it), with the unit's number
// and m->recompute (gpt2.h's GPT2Recompute): what the forward keeps and the backward recomputes.
// Where parameters and gradients live is ZeRO's business: the hooks ask zero.h for each unit's
// as the passes reach it, which is where its gathers, prefetches and reductions happen. A
// trainer whose kernels compute in the storage type passes zero.h's pointers through; the CPU
// trainer, whose kernels compute in fp32, converts 16-bit storage there.
#ifndef MODEL_H
#define MODEL_H

// The 16-bit copy of tensor t of unit p, or NULL when the unit has none.
static inline const void *gpt2_x16(UnitParams p, const GPT2_FLOATX *t) {
    return p.x16 ? (const uint16_t *)p.x16 + (t - p.f32) : NULL;
}

// What gpt2_layer_forward runs of a layer's kernels.
enum {
    LAYER_FORWARD,   // all of them, through the layer's output
    LAYER_BODY,      // all but the last matmul and residual: a full recompute of a segment's last layer,
                     // whose output (the next checkpoint) was kept
    LAYER_SELECTIVE  // what selective recompute does not keep: the LayerNorms, attention, GELU
};

// Layer l's forward kernels over its activations x, with its parameters up. The order and the
// rounding points are the same whatever `what` leaves out: a recompute computes what the
// forward computed, bit for bit. With GPT2_FUSED_RESIDUAL_LN a LAYER_FORWARD ends at its MLP
// projection (in dbtc), its output's residual add left to the caller's next call, and prev is
// the layer before when that layer's add is left to this one (its first kernel adds it, into
// prev->residual3, which is x->residual, and LayerNorms the sum); else NULL. Without the hook
// every layer adds its own output and prev is unused.
static void gpt2_layer_forward(GPT2 *m, int l, UnitParams up, const LayerActs *x, const LayerActs *prev, int B, int T,
                               int what) {
    const GPT2Config *c = &m->cfg;
    int C = c->channels, NH = c->num_heads, N = B * T, sel = what == LAYER_SELECTIVE;
    size_t btc = (size_t)N * C;
    Activations *a = &m->acts;
    LayerTensors w = gpt2_layer_tensors(c, up.f32);
#if defined(GPT2_FUSED_RESIDUAL_LN)
    if (prev) {
        residual_layernorm_forward(&m->kern, prev->residual3, x->ln1, x->ln1_mean, x->ln1_rstd, prev->residual2,
                                   a->dbtc, w.ln1w, w.ln1b, N, C);
        gpt2_act_rounded(m, prev, l - 1, A_RESIDUAL3, B, T);
    } else
#endif
        layernorm_forward(&m->kern, x->ln1, x->ln1_mean, x->ln1_rstd, x->residual, w.ln1w, w.ln1b, N, C);
    (void)prev;
    gpt2_act_rounded(m, x, l, A_LN1, B, T);
    if (!sel) {
        matmul_forward(&m->kern, x->qkv, x->ln1, w.qkvw, gpt2_x16(up, w.qkvw), w.qkvb, N, C, 3 * C);
        gpt2_act_rounded(m, x, l, A_QKV, B, T);
    }
    attention_forward(&m->kern, x->atty, x->att, x->qkv, B, T, C, NH);
    gpt2_act_rounded(m, x, l, A_ATTY, B, T);
    if (!sel) { // the projections land in dbtc (free during the forward), then the residual adds
        matmul_forward(&m->kern, a->dbtc, x->atty, w.attprojw, gpt2_x16(up, w.attprojw), w.attprojb, N, C, C);
#if defined(GPT2_FUSED_RESIDUAL_LN)
        residual_layernorm_forward(&m->kern, x->residual2, x->ln2, x->ln2_mean, x->ln2_rstd, x->residual, a->dbtc,
                                   w.ln2w, w.ln2b, N, C);
        gpt2_act_rounded(m, x, l, A_RESIDUAL2, B, T);
#else
        residual_forward(&m->kern, x->residual2, x->residual, a->dbtc, btc);
        gpt2_act_rounded(m, x, l, A_RESIDUAL2, B, T);
#endif
    }
#if defined(GPT2_FUSED_RESIDUAL_LN)
    if (sel) // selective recompute kept residual2: its LayerNorm alone
#endif
        layernorm_forward(&m->kern, x->ln2, x->ln2_mean, x->ln2_rstd, x->residual2, w.ln2w, w.ln2b, N, C);
    gpt2_act_rounded(m, x, l, A_LN2, B, T);
    if (!sel) {
        matmul_forward(&m->kern, x->fch, x->ln2, w.fcw, gpt2_x16(up, w.fcw), w.fcb, N, C, 4 * C);
        gpt2_act_rounded(m, x, l, A_FCH, B, T);
    }
    gelu_forward(&m->kern, x->fch_gelu, x->fch, 4 * btc);
    gpt2_act_rounded(m, x, l, A_FCH_GELU, B, T);
    if (what != LAYER_FORWARD) return;
    matmul_forward(&m->kern, a->dbtc, x->fch_gelu, w.fcprojw, gpt2_x16(up, w.fcprojw), w.fcprojb, N, 4 * C, C);
#if !defined(GPT2_FUSED_RESIDUAL_LN) // (fused: the next layer's first kernel or the final LayerNorm adds it)
    residual_forward(&m->kern, x->residual3, x->residual2, a->dbtc, btc);
    gpt2_act_rounded(m, x, l, A_RESIDUAL3, B, T);
#endif
}

// Forward pass over inputs (B,T) (host arrays) with B <= m->B, T <= m->T. With targets it
// computes the loss per position into acts.losses, and with dloss != 0 also the logits'
// gradient (in place), ready for gpt2_backward. dloss is d(objective)/d(loss at one position).
// Returns the mean loss over the B*T positions (0 without targets). Every rank must call it
// (ZeRO-3 gathers).
static float gpt2_forward(GPT2 *m, const int *inputs, const int *targets, int B, int T, float dloss) {
    const GPT2Config *c = &m->cfg;
    int C = c->channels, L = c->num_layers, N = B * T, F = gpt2_unit_of_layer(L); // the final LayerNorm's unit
    Activations *a = &m->acts;
    Trace *tr = gpt2_trace(m);
    upload_batch(m, inputs, targets, N);
    double s = trace_begin(tr, "forward", TRACE_FORWARD, UNIT_EMBED, 0.0);
    UnitParams ep = gpt2_unit_params(m, UNIT_EMBED, gpt2_unit_of_layer(0));
    EmbedTensors emb = gpt2_embed_tensors(c, ep.f32);
    encoder_forward(&m->kern, a->encoded, m->dev_inputs, emb.wte, emb.wpe, B, T, C);
    trace_end(tr, s);
    LayerActs prev; // the layer before
    memset(&prev, 0, sizeof(prev));
    for (int l = 0; l < L; l++) {
        int u = gpt2_unit_of_layer(l);
        s = trace_begin(tr, "forward", TRACE_FORWARD, u, 0.0);
        UnitParams up = gpt2_unit_params(m, u, u + 1); // u + 1: the next layer, or F
        LayerActs x = gpt2_layer_acts_forward(m, l, B, T);
        gpt2_layer_forward(m, l, up, &x, l > 0 ? &prev : NULL, B, T, LAYER_FORWARD);
#if defined(GPT2_FUSED_RESIDUAL_LN)
        if (l > 0) gpt2_layer_store(m, l - 1, B, T); // its output is added now
#else
        gpt2_layer_store(m, l, B, T);
#endif
        prev = x;
        trace_end(tr, s);
    }
    s = trace_begin(tr, "forward", TRACE_FORWARD, F, 0.0);
    FinalTensors fin = gpt2_final_tensors(c, gpt2_unit_params(m, F, -1).f32);
#if defined(GPT2_FUSED_RESIDUAL_LN) // the last layer's output, added, and its LayerNorm
    residual_layernorm_forward(&m->kern, prev.residual3, a->lnf, a->lnf_mean, a->lnf_rstd, prev.residual2, a->dbtc,
                               fin.lnfw, fin.lnfb, N, C);
    gpt2_act_rounded(m, &prev, L - 1, A_RESIDUAL3, B, T);
    gpt2_layer_store(m, L - 1, B, T);
#else
    layernorm_forward(&m->kern, a->lnf, a->lnf_mean, a->lnf_rstd, gpt2_layers_output(m, B, T), fin.lnfw, fin.lnfb, N, C);
#endif
    trace_end(tr, s);
    s = trace_begin(tr, "lm_head", TRACE_FORWARD, UNIT_EMBED, 0.0);
    ep = gpt2_unit_params(m, UNIT_EMBED, -1); // (ZeRO-3 has kept it gathered)
    emb = gpt2_embed_tensors(c, ep.f32);
    matmul_forward(&m->kern, a->logits, a->lnf, emb.wte, gpt2_x16(ep, emb.wte), NULL, N, C, c->padded_vocab_size); // tied LM head
    float loss = targets ? classifier_loss(m, N, dloss) : 0.0f;
    trace_end(tr, s);
    return loss;
}

// The backward recomputes layer l's forward (`what`: gpt2_layer_forward's) where the storage
// hooks say, with its parameters up.
// prev: gpt2_layer_forward's (the layer recomputed just before, in the same segment, or NULL);
// returns the layer's activations, the next recompute's prev.
static LayerActs gpt2_layer_recompute(GPT2 *m, int l, UnitParams up, const LayerActs *prev, int B, int T, int what) {
    double s = trace_begin(gpt2_trace(m), "recompute", TRACE_RECOMPUTE, gpt2_unit_of_layer(l), 0.0);
    LayerActs x = gpt2_layer_acts_recompute(m, l, B, T);
    gpt2_layer_forward(m, l, up, &x, prev, B, T, what);
    gpt2_layer_recomputed(m, l, B, T);
    trace_end(gpt2_trace(m), s);
    return x;
}

// Backward pass after gpt2_forward(..., dloss != 0) on the same inputs. Each unit's gradient
// is handed on as soon as it is complete, so its reduction overlaps the rest. With recompute,
// each layer's activations are computed again first (gpt2.h: full recompute, on reaching a
// segment's last layer, the segment from its checkpoint; selective, each layer's recomputed
// part), with the layer's parameters asked for again (ZeRO-3 gathers them where its buffers no
// longer hold them) in the order gpt2_backward_next_layer gives, which the prefetch follows.
static void gpt2_backward(GPT2 *m, int B, int T) {
    const GPT2Config *c = &m->cfg;
    int C = c->channels, L = c->num_layers, NH = c->num_heads, N = B * T, F = gpt2_unit_of_layer(L);
    size_t btc = (size_t)N * C;
    Activations *a = &m->acts;
    GPT2Recompute rc = m->recompute;
    Trace *tr = gpt2_trace(m);
    // The embeddings are used first and last: their gradient collects the LM head's share now
    // and the token lookup's at the end, and is reduced once, after both.
    double s = trace_begin(tr, "lm_head", TRACE_BACKWARD, UNIT_EMBED, 0.0);
    UnitParams ep = gpt2_unit_params(m, UNIT_EMBED, -1);
    EmbedTensors emb = gpt2_embed_tensors(c, ep.f32);
    EmbedTensors demb = gpt2_embed_tensors(c, gpt2_unit_grads(m, UNIT_EMBED));
    FinalTensors fin = gpt2_final_tensors(c, gpt2_unit_params(m, F, gpt2_unit_of_layer(gpt2_backward_first_layer(rc, L))).f32);
    FinalTensors dfin = gpt2_final_tensors(c, gpt2_unit_grads(m, F));
    matmul_backward(&m->kern, a->dbtc, demb.wte, NULL, a->logits, a->lnf, emb.wte, gpt2_x16(ep, emb.wte), N, C, c->padded_vocab_size);
    trace_end(tr, s);
    s = trace_begin(tr, "backward", TRACE_BACKWARD, F, 0.0);
    zero_fill(&m->kern, a->dresidual, btc);
    layernorm_backward(&m->kern, a->dresidual, dfin.lnfw, dfin.lnfb, a->dbtc, gpt2_layers_output(m, B, T), fin.lnfw, a->lnf_mean,
                       a->lnf_rstd, N, C);
    gpt2_unit_grads_done(m, F);
    trace_end(tr, s);
    // dresidual is the gradient of the residual stream; each block adds its branches to it.
    for (int l = L - 1; l >= 0; l--) {
        int u = gpt2_unit_of_layer(l), next = gpt2_backward_next_layer(rc, l);
        int full = rc.mode == RECOMPUTE_FULL && gpt2_segment_end(rc, L, l), first = gpt2_segment_start(rc, l);
        LayerActs prev; // full: the segment's layer recomputed last
        memset(&prev, 0, sizeof(prev));
        if (full) // the segment's layers before this one, from its checkpoint, each with its output
            for (int j = first; j < l; j++)
                prev = gpt2_layer_recompute(m, j, gpt2_unit_params(m, gpt2_unit_of_layer(j), gpt2_unit_of_layer(j + 1)),
                                            j > first ? &prev : NULL, B, T, LAYER_FORWARD);
        s = trace_begin(tr, "backward", TRACE_BACKWARD, u, 0.0);
        UnitParams up = gpt2_unit_params(m, u, next >= 0 ? gpt2_unit_of_layer(next) : -1);
        if (full) gpt2_layer_recompute(m, l, up, l > first ? &prev : NULL, B, T, LAYER_BODY);
        if (rc.mode == RECOMPUTE_SELECTIVE) gpt2_layer_recompute(m, l, up, NULL, B, T, LAYER_SELECTIVE);
        LayerTensors w = gpt2_layer_tensors(c, up.f32);
        LayerTensors g = gpt2_layer_tensors(c, gpt2_unit_grads(m, u));
        LayerActs x = gpt2_layer_acts_backward(m, l, B, T);
        // MLP branch: residual3 = residual2 + fcproj(gelu(fc(ln2(residual2))))
        matmul_backward_gelu(&m->kern, a->dbt4c, g.fcprojw, g.fcprojb, a->dresidual, x.fch_gelu, w.fcprojw, gpt2_x16(up, w.fcprojw),
                             x.fch, N, 4 * C, C);
        matmul_backward(&m->kern, a->dbtc, g.fcw, g.fcb, a->dbt4c, x.ln2, w.fcw, gpt2_x16(up, w.fcw), N, C, 4 * C);
        layernorm_backward(&m->kern, a->dresidual, g.ln2w, g.ln2b, a->dbtc, x.residual2, w.ln2w, x.ln2_mean, x.ln2_rstd, N, C);
        // attention branch: residual2 = residual + attproj(attention(qkv(ln1(residual))))
        matmul_backward(&m->kern, a->dbtc, g.attprojw, g.attprojb, a->dresidual, x.atty, w.attprojw, gpt2_x16(up, w.attprojw), N, C, C);
        attention_backward(&m->kern, a->dqkv, x.att, a->dbtc, x.qkv, x.atty, B, T, C, NH);
        matmul_backward(&m->kern, a->dbtc, g.qkvw, g.qkvb, a->dqkv, x.ln1, w.qkvw, gpt2_x16(up, w.qkvw), N, C, 3 * C);
        layernorm_backward(&m->kern, a->dresidual, g.ln1w, g.ln1b, a->dbtc, x.residual, w.ln1w, x.ln1_mean, x.ln1_rstd, N, C);
        gpt2_unit_grads_done(m, u);
        trace_end(tr, s);
    }
    s = trace_begin(tr, "backward", TRACE_BACKWARD, UNIT_EMBED, 0.0);
    encoder_backward(&m->kern, demb.wte, demb.wpe, a->dresidual, m->dev_inputs, B, T, C);
    gpt2_unit_grads_done(m, UNIT_EMBED);
    trace_end(tr, s);
    gpt2_backward_done(m);
}

#endif // MODEL_H
