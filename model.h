// model.h: GPT-2's forward and backward passes, written once for both trainers.
//
// Contract. The including trainer defines, before including this header, its GPT2 struct
// (with at least GPT2Config cfg; Zero z; Activations acts; const int *dev_inputs, *dev_targets)
// and these kernels, with exactly these signatures and the shapes their comments in
// train_gpt_cpu.c give (the CPU runs them with OpenMP and OpenBLAS, the GPU launches them):
//   encoder_forward(out, inp, wte, wpe, B, T, C)          encoder_backward(dwte, dwpe, dout, inp, B, T, C)
//   layernorm_forward(out, mean, rstd, inp, w, b, N, C)   layernorm_backward(dinp+=, dw+=, db+=, dout, inp, w, mean, rstd, N, C)
//   matmul_forward(out, inp, w, bias, N, C, OC)           matmul_backward(dinp, dw+=, dbias+=, dout, inp, w, N, C, OC)
//   attention_forward(out, att, qkv, B, T, C, NH)         attention_backward(dqkv, att, dout, qkv, out, B, T, C, NH)
//   gelu_forward(out, inp, n)                             gelu_backward(dinp, inp, dout, n)
//   residual_forward(out, a, b, n)                        zero_fill(p, n)
//   upload_batch(m, inputs, targets, N): sets m->dev_inputs / dev_targets (the GPU copies)
//   classifier_loss(m, N, dloss) -> mean loss: the fused softmax + cross-entropy (+ gradient)
// Where parameters and gradients live is ZeRO's business: each unit's are asked of zero.h as
// the passes reach it, which is where its gathers, prefetches and reductions happen.
#ifndef MODEL_H
#define MODEL_H

// Forward pass over inputs (B,T) (host arrays) with B <= m->B, T <= m->T. With targets it
// computes the loss per position into acts.losses, and with dloss != 0 also the logits'
// gradient (in place), ready for gpt2_backward. dloss is d(objective)/d(loss at one position).
// Returns the mean loss over the B*T positions (0 without targets). Every rank must call it
// (ZeRO-3 gathers).
static float gpt2_forward(GPT2 *m, const int *inputs, const int *targets, int B, int T, float dloss) {
    const GPT2Config *c = &m->cfg;
    Zero *z = &m->z;
    int C = c->channels, L = c->num_layers, NH = c->num_heads, N = B * T, F = gpt2_final_unit(&z->lay);
    size_t btc = (size_t)N * C;
    Activations *a = &m->acts;
    upload_batch(m, inputs, targets, N);
    EmbedTensors emb = gpt2_embed_tensors(c, zero_params(z, UNIT_EMBED, gpt2_unit_of_layer(0)));
    encoder_forward(a->encoded, m->dev_inputs, emb.wte, emb.wpe, B, T, C);
    for (int l = 0; l < L; l++) {
        int u = gpt2_unit_of_layer(l);
        LayerTensors w = gpt2_layer_tensors(c, zero_params(z, u, u + 1)); // u + 1: next layer, or F
        const float *residual = l == 0 ? a->encoded : a->residual3 + (l - 1) * btc;
        float *ln1 = a->ln1 + l * btc, *qkv = a->qkv + l * 3 * btc, *atty = a->atty + l * btc;
        float *att = a->att + (size_t)l * B * NH * T * T, *residual2 = a->residual2 + l * btc;
        float *ln2 = a->ln2 + l * btc, *fch = a->fch + l * 4 * btc, *fch_gelu = a->fch_gelu + l * 4 * btc;
        float *residual3 = a->residual3 + l * btc;
        layernorm_forward(ln1, a->ln1_mean + l * N, a->ln1_rstd + l * N, residual, w.ln1w, w.ln1b, N, C);
        matmul_forward(qkv, ln1, w.qkvw, w.qkvb, N, C, 3 * C);
        attention_forward(atty, att, qkv, B, T, C, NH);
        // the projections land in dbtc (free during the forward), then the residual adds
        matmul_forward(a->dbtc, atty, w.attprojw, w.attprojb, N, C, C);
        residual_forward(residual2, residual, a->dbtc, btc);
        layernorm_forward(ln2, a->ln2_mean + l * N, a->ln2_rstd + l * N, residual2, w.ln2w, w.ln2b, N, C);
        matmul_forward(fch, ln2, w.fcw, w.fcb, N, C, 4 * C);
        gelu_forward(fch_gelu, fch, 4 * btc);
        matmul_forward(a->dbtc, fch_gelu, w.fcprojw, w.fcprojb, N, 4 * C, C);
        residual_forward(residual3, residual2, a->dbtc, btc);
    }
    FinalTensors fin = gpt2_final_tensors(c, zero_params(z, F, -1));
    layernorm_forward(a->lnf, a->lnf_mean, a->lnf_rstd, a->residual3 + (L - 1) * btc, fin.lnfw, fin.lnfb, N, C);
    matmul_forward(a->logits, a->lnf, emb.wte, NULL, N, C, c->padded_vocab_size); // tied LM head
    if (!targets) return 0.0f;
    return classifier_loss(m, N, dloss);
}

// Backward pass after gpt2_forward(..., dloss != 0) on the same inputs. Each unit's gradient
// is handed to zero.h as soon as it is complete, so its reduction overlaps the rest.
static void gpt2_backward(GPT2 *m, int B, int T) {
    const GPT2Config *c = &m->cfg;
    Zero *z = &m->z;
    int C = c->channels, L = c->num_layers, NH = c->num_heads, N = B * T, F = gpt2_final_unit(&z->lay);
    size_t btc = (size_t)N * C;
    Activations *a = &m->acts;
    // The embeddings are used first and last: their gradient collects the LM head's share now
    // and the token lookup's at the end, and is reduced once, after both.
    EmbedTensors emb = gpt2_embed_tensors(c, zero_params(z, UNIT_EMBED, -1));
    EmbedTensors demb = gpt2_embed_tensors(c, zero_grads(z, UNIT_EMBED));
    FinalTensors fin = gpt2_final_tensors(c, zero_params(z, F, gpt2_unit_of_layer(L - 1)));
    FinalTensors dfin = gpt2_final_tensors(c, zero_grads(z, F));
    matmul_backward(a->dbtc, demb.wte, NULL, a->logits, a->lnf, emb.wte, N, C, c->padded_vocab_size);
    zero_fill(a->dresidual, btc);
    layernorm_backward(a->dresidual, dfin.lnfw, dfin.lnfb, a->dbtc, a->residual3 + (L - 1) * btc, fin.lnfw,
                       a->lnf_mean, a->lnf_rstd, N, C);
    zero_grads_done(z, F);
    // dresidual is the gradient of the residual stream; each block adds its branches to it.
    for (int l = L - 1; l >= 0; l--) {
        int u = gpt2_unit_of_layer(l);
        LayerTensors w = gpt2_layer_tensors(c, zero_params(z, u, l > 0 ? u - 1 : -1));
        LayerTensors g = gpt2_layer_tensors(c, zero_grads(z, u));
        const float *residual = l == 0 ? a->encoded : a->residual3 + (l - 1) * btc;
        float *ln1 = a->ln1 + l * btc, *qkv = a->qkv + l * 3 * btc, *atty = a->atty + l * btc;
        float *att = a->att + (size_t)l * B * NH * T * T, *residual2 = a->residual2 + l * btc;
        float *ln2 = a->ln2 + l * btc, *fch = a->fch + l * 4 * btc, *fch_gelu = a->fch_gelu + l * 4 * btc;
        // MLP branch: residual3 = residual2 + fcproj(gelu(fc(ln2(residual2))))
        matmul_backward(a->dbt4c, g.fcprojw, g.fcprojb, a->dresidual, fch_gelu, w.fcprojw, N, 4 * C, C);
        gelu_backward(a->dbt4c, fch, a->dbt4c, 4 * btc);
        matmul_backward(a->dbtc, g.fcw, g.fcb, a->dbt4c, ln2, w.fcw, N, C, 4 * C);
        layernorm_backward(a->dresidual, g.ln2w, g.ln2b, a->dbtc, residual2, w.ln2w, a->ln2_mean + l * N,
                           a->ln2_rstd + l * N, N, C);
        // attention branch: residual2 = residual + attproj(attention(qkv(ln1(residual))))
        matmul_backward(a->dbtc, g.attprojw, g.attprojb, a->dresidual, atty, w.attprojw, N, C, C);
        attention_backward(a->dqkv, att, a->dbtc, qkv, atty, B, T, C, NH);
        matmul_backward(a->dbtc, g.qkvw, g.qkvb, a->dqkv, ln1, w.qkvw, N, C, 3 * C);
        layernorm_backward(a->dresidual, g.ln1w, g.ln1b, a->dbtc, residual, w.ln1w, a->ln1_mean + l * N,
                           a->ln1_rstd + l * N, N, C);
        zero_grads_done(z, u);
    }
    encoder_backward(demb.wte, demb.wpe, a->dresidual, m->dev_inputs, B, T, C);
    zero_grads_done(z, UNIT_EMBED);
    zero_end_backward(z);
}

#endif // MODEL_H
