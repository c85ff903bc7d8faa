// test/planner_web_check.cjs: drives the planner page (docs/planner/) in headless Chromium
// (Debian's, through puppeteer-core) and checks every number it shows against
// `train_gpt_cpu --plan ... --json` run here. Used by test/test_planner_web.sh:
//   node test/planner_web_check.cjs URL TRAINER CHROMIUM SCRATCH [SCREENSHOT]
// Each configuration is set through the page's own inputs (select, type, change events, as a
// user does), starting from the page's defaults; the trainer's command line is built here from the
// same configuration, independently of the page. Memory must be equal to the byte, times to the
// digits the trainer prints.
'use strict';
const { execFileSync } = require('child_process');
const fs = require('fs');
const path = require('path');
const puppeteer = require(path.join(__dirname, '..', 'web', 'node_modules', 'puppeteer-core'));

const [url, trainer, chromium, scratch, screenshot] = process.argv.slice(2);
// The GPU trainer's plan (train_gpt --plan, bf16 build): its CUDA emulator build, which runs the
// same main (test/bin/train_gpt_emu_bf16; test_gpu_emu builds it too).
const gpuTrainer = process.env.GPU_TRAINER;
const THREADS = '1'; // the page's default --threads (a browser cannot know the trainer's cores)
const GPT3 = { 'gpt3-350m': [24, 1024, 16], 'gpt3-1.3b': [24, 2048, 16], 'gpt3-2.7b': [32, 2560, 32], 'gpt3-13b': [40, 5120, 40], 'gpt3-175b': [96, 12288, 96] };

// model: a preset (--model), a GPT-3 choice (--layers/--channels/--heads/--max-seq-len 2048),
// 'shape' with layers/channels/heads..., or 'params'. The rest: option name -> value (true: a flag).
const CONFIGS = [
  { model: 'd12' },
  { model: 'd12', 'zero-stage': '1', world: '2', precision: 'bf16', hardware: 'a100-80gb-sxm' },
  { model: 'd12', 'zero-stage': '2', world: '8', precision: 'fp16', hardware: 'h100-80gb-sxm' },
  { model: 'd24', 'zero-stage': '3', world: '8', precision: 'bf16', hardware: 'h100-80gb-sxm', 'grad-accum': '4' },
  { model: 'd36', 'zero-stage': '3', world: '64', precision: 'bf16', hardware: 'a100-80gb-sxm', network: 'eth-100' },
  { model: 'd48', 'zero-stage': '3', world: '1024', precision: 'bf16', hardware: 'h100-80gb-sxm', network: 'ib-400', batch: '4', 'seq-len': '1024' },
  { model: 'd48', 'zero-stage': '2', world: '16', precision: 'fp32', optimizer: 'lion', hardware: 'a100-80gb-sxm' },
  { model: 'd12', 'zero-stage': '0', precision: 'fp32', optimizer: 'sgd-momentum', hardware: 'h100-80gb-sxm' },
  { model: 'd12', 'zero-stage': '1', world: '4', optimizer: 'sgd', precision: 'bf16', hardware: 'a100-80gb-sxm' },
  { model: 'd24', 'zero-stage': '2', world: '8', 'offload-optimizer': 'cpu', precision: 'bf16', hardware: 'h100-80gb-sxm' },
  { model: 'd24', 'zero-stage': '3', world: '8', 'offload-optimizer': 'nvme', precision: 'fp16', hardware: 'a100-80gb-sxm' },
  { model: 'd36', 'zero-stage': '3', world: '16', 'offload-optimizer': 'nvme', 'offload-param': 'cpu', precision: 'bf16', hardware: 'h100-80gb-sxm' },
  { model: 'd12', 'zero-stage': '3', world: '2', 'offload-param': 'nvme', 'offload-optimizer': 'cpu', optimizer: 'lion', hardware: 'a100-80gb-sxm' },
  { model: 'd24', recompute: 'full', precision: 'bf16', 'zero-stage': '2', world: '4', hardware: 'h100-80gb-sxm' },
  { model: 'd48', recompute: 'full', 'recompute-every': '4', 'cpu-checkpointing': true, 'zero-stage': '3', world: '32', precision: 'bf16', hardware: 'a100-80gb-sxm' },
  { model: 'd36', recompute: 'selective', precision: 'fp16', 'zero-stage': '1', world: '8', hardware: 'h100-80gb-sxm', batch: '16', 'seq-len': '512' },
  { model: 'gpt3-1.3b', 'zero-stage': '3', world: '128', precision: 'bf16', hardware: 'h100-80gb-sxm', 'gpus-per-node': '4', batch: '2', 'seq-len': '2048' },
  { model: 'gpt3-2.7b', 'zero-stage': '3', world: '256', precision: 'bf16', optimizer: 'lion', hardware: 'a100-80gb-sxm', network: 'eth-100', 'offload-optimizer': 'cpu' },
  { model: 'shape', layers: '6', channels: '384', heads: '6', 'zero-stage': '2', world: '3', precision: 'fp32', hardware: 'h100-80gb-sxm' },
  { model: 'shape', layers: '4', channels: '256', heads: '4', 'vocab-size': '8000', 'max-seq-len': '256', 'seq-len': '256', precision: 'bf16', hardware: 'a100-80gb-sxm' },
  { model: 'params', params: '7e9', precision: 'bf16', 'zero-stage': '3', world: '64' },
  { model: 'params', params: '175B', precision: 'fp16', optimizer: 'lion', 'zero-stage': '1', world: '1024', 'offload-optimizer': 'cpu' },
  { model: 'd12', threads: '4', precision: 'bf16', 'zero-stage': '2', world: '2', hardware: 'this-machine' },
  { model: 'gpt3-13b', 'zero-stage': '3', world: '64', precision: 'bf16', hardware: 'h100-80gb-sxm', batch: '4', 'seq-len': '2048' },
  { model: 'gpt3-175b', 'zero-stage': '3', world: '1024', precision: 'bf16', hardware: 'a100-80gb-sxm', network: 'ib-400', batch: '1', 'seq-len': '2048', recompute: 'full', 'offload-optimizer': 'cpu' },
  { model: 'gpt3-350m', 'zero-stage': '2', world: '8', precision: 'bf16', hardware: 'h100-80gb-sxm', 'grad-accum': '8', recompute: 'full' },
];
// The GPU trainer's layout (gpu/layout.h: activations at their element size, host memory for
// offload and cpu_checkpointing), its default precision bf16.
const GPU_CONFIGS = [
  { trainer: 'train_gpt', model: 'd12' },
  { trainer: 'train_gpt', model: 'd48', 'zero-stage': '3', world: '64', 'offload-optimizer': 'cpu', 'offload-param': 'cpu', hardware: 'h100-80gb-sxm', batch: '8', 'seq-len': '1024' },
  { trainer: 'train_gpt', model: 'd36', 'zero-stage': '2', world: '8', recompute: 'full', 'cpu-checkpointing': true, hardware: 'a100-80gb-sxm', precision: 'fp16' },
  { trainer: 'train_gpt', model: 'gpt3-175b', 'zero-stage': '3', world: '1024', 'offload-optimizer': 'nvme', optimizer: 'lion', recompute: 'selective', hardware: 'h100-80gb-sxm', network: 'eth-100', batch: '1', 'seq-len': '2048' },
].filter(() => gpuTrainer);

// What the trainer refuses (its one line must be the page's error), and what the 32-bit build cannot count.
const BAD = [
  { model: 'd12', 'zero-stage': '0', 'offload-optimizer': 'cpu' },
  { model: 'd12', 'zero-stage': '2', 'offload-param': 'cpu' },
  { model: 'd12', 'seq-len': '2048' },
  { model: 'd12', world: '12', 'gpus-per-node': '8', hardware: 'h100-80gb-sxm' },
  { model: 'd12', 'recompute-every': '2' },
  { model: 'shape', layers: '4', channels: '100', heads: '3' },
  { model: 'params', params: 'seven' },
];
const TIME_KEYS = ['step_ms', 'fwd_ms', 'bwd_ms', 'optim_ms', 'exposed_comm_ms', 'comm_ms', 'tokens_per_s', 'mfu'];
const TIME_IDS = ['step-ms', 'fwd-ms', 'bwd-ms', 'optim-ms', 'exposed-comm-ms', 'comm-ms', 'tokens-per-s', 'mfu'];

function trainerArgs(c) {
  const a = ['--plan'];
  for (const [k, v] of Object.entries(c)) {
    if (k === 'trainer') continue;
    if (k === 'model') {
      if (GPT3[v]) a.push('--layers', String(GPT3[v][0]), '--channels', String(GPT3[v][1]), '--heads', String(GPT3[v][2]), '--max-seq-len', '2048');
      else if (v !== 'shape' && v !== 'params') a.push('--model', v);
      continue;
    }
    a.push('--' + k);
    if (v !== true) a.push(v);
  }
  if (!c.threads && c.trainer !== 'train_gpt') a.push('--threads', THREADS);
  if (c.model !== 'params') a.push('--time');
  a.push('--json');
  return a;
}
function runTrainer(args, gpu) {
  try {
    return { rc: 0, out: execFileSync(gpu ? gpuTrainer : trainer, args, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] }), err: '' };
  } catch (e) {
    return { rc: e.status, out: e.stdout, err: e.stderr.split('\n').filter(l => l.startsWith('error')).join('\n') };
  }
}
// The raw text of a number in the trainer's JSON (so that "times to the printed precision" means its digits).
function rawNumber(json, key) {
  const m = json.match(new RegExp(`"${key}":(-?[0-9.eE+-]+|null)`));
  if (!m) throw new Error(`no "${key}" in the trainer's JSON`);
  return m[1];
}

let failures = 0, checks = 0;
function expect(ok, what) {
  checks++;
  if (!ok) { failures++; console.log('FAIL: ' + what); }
}

async function setInputs(page, c) {
  await page.bringToFront(); // (a tab in the background is not drawn: clicks would wait)
  await page.goto(url, { waitUntil: 'load' });
  await page.waitForSelector('body[data-ready="1"]', { timeout: 30000 });
  const order = ['trainer', 'model', 'layers', 'channels', 'heads', 'vocab-size', 'max-seq-len', 'params'];
  const keys = Object.keys(c);
  keys.sort((x, y) => { const i = order.indexOf(x), j = order.indexOf(y); return (i < 0 ? 99 : i) - (j < 0 ? 99 : j); });
  for (const k of keys) {
    const v = c[k];
    if (k === 'model') { await page.select('#model-choice', v); continue; }
    if (k === 'trainer') { await page.select('#trainer', v); continue; }
    const sel = `[name="${k}"]`;
    const tag = await page.$eval(sel, e => e.tagName + ':' + e.type);
    if (tag.startsWith('SELECT')) await page.select(sel, v);
    else if (tag === 'INPUT:checkbox') { if (v) await page.click(sel); }
    else { // type it as a user does: select what is there, type, leave the field (change fires)
      await page.click(sel, { clickCount: 3 });
      await page.keyboard.press('Backspace');
      await page.type(sel, v);
      await page.keyboard.press('Tab');
    }
  }
}
const shown = page => page.evaluate(ids => {
  const o = {};
  for (const id of ids) o[id] = document.getElementById(id).textContent;
  o.error = document.getElementById('error').classList.contains('hidden') ? '' : document.getElementById('error').textContent;
  o.kinds = {};
  for (const tr of document.querySelectorAll('#kinds tbody tr')) o.kinds[tr.cells[0].textContent] = [tr.cells[1].textContent, tr.cells[2].textContent];
  o.planMs = Number(document.body.dataset.planMs);
  o.search = location.search;
  return o;
}, ['device-bytes', 'host-bytes', 'nvme-bytes', ...TIME_IDS]);

(async () => {
  const browser = await puppeteer.launch({ executablePath: chromium, args: ['--no-sandbox', '--headless=new', '--disable-gpu'] });
  const page = await browser.newPage();
  await page.setViewport({ width: 1200, height: 900 });
  const origin = new URL(url).origin, foreign = [];
  page.on('request', r => { if (!r.url().startsWith(origin) && !r.url().startsWith('data:')) foreign.push(r.url()); });
  page.on('pageerror', e => { failures++; console.log('FAIL: page error: ' + e.message); });
  const planMs = [];
  const p2 = await browser.newPage(); // opens each configuration's link

  let n = 0;
  for (const c of [...CONFIGS, ...GPU_CONFIGS]) {
    const linkCheck = n++ % 3 === 0; // (every third: a page load each)
    const gpu = c.trainer === 'train_gpt';
    const args = trainerArgs(c), what = (gpu ? './train_gpt ' : './train_gpt_cpu ') + args.join(' ');
    const t = runTrainer(args, gpu);
    expect(t.rc === 0, `${what}: the trainer refused it: ${t.err}`);
    if (t.rc !== 0) continue;
    const j = JSON.parse(t.out);
    await setInputs(page, c);
    const s = await shown(page);
    planMs.push(s.planMs);
    expect(s.error === '', `${what}: the page shows an error: ${s.error}`);
    for (const loc of ['device', 'host', 'nvme'])
      expect(s[loc + '-bytes'] === String(j[loc]), `${what}: ${loc}-bytes ${s[loc + '-bytes']}, the trainer ${j[loc]}`);
    for (const k of j.kinds) {
      const row = s.kinds[k];
      expect(row && row[0] === j.where[k] && row[1] === (j[k] === null ? 'unknown' : String(j[k])),
             `${what}: ${k}: page ${row}, the trainer ${j.where[k]} ${j[k]}`);
    }
    expect(Object.keys(s.kinds).length === j.kinds.length, `${what}: the page lists ${Object.keys(s.kinds)}, the trainer ${j.kinds}`);
    if (c.model !== 'params') TIME_KEYS.forEach((k, i) => {
      const raw = rawNumber(t.out, k);
      expect(s[TIME_IDS[i]] !== '' && Number(s[TIME_IDS[i]]) === Number(raw), `${what}: ${TIME_IDS[i]} ${s[TIME_IDS[i]]}, the trainer ${raw}`);
    });
    else expect(s['step-ms'] === '-', `${what}: a bare count shows a step time`);
    // the URL is the configuration: a fresh page on it shows the same
    if (linkCheck) {
    await p2.bringToFront();
    await p2.goto(url.replace(/\?.*$/, '') + s.search, { waitUntil: 'load' });
    await p2.waitForSelector('body[data-ready="1"]', { timeout: 30000 });
    const s2 = await shown(p2);
    expect(s2['device-bytes'] === s['device-bytes'] && s2['step-ms'] === s['step-ms'] && s2['host-bytes'] === s['host-bytes'],
           `${what}: the link ${s.search} shows ${s2['device-bytes']} / ${s2['step-ms']}`);
    }
    console.log(`ok ${s.search}  device ${s['device-bytes']}  step ${s['step-ms']} ms  (${s.planMs.toFixed(1)} ms in the page)`);
  }

  for (const c of BAD) {
    const args = trainerArgs(c), what = './train_gpt_cpu ' + args.join(' ');
    const t = runTrainer(args);
    expect(t.rc !== 0 && t.err.startsWith('error'), `${what}: the trainer accepted it`);
    await setInputs(page, c);
    const s = await shown(page);
    expect(s.error === t.err, `${what}: the page says '${s.error}', the trainer '${t.err}'`);
    expect(s['device-bytes'] === '-', `${what}: the page still shows ${s['device-bytes']}`);
    console.log(`ok refused: ${t.err}`);
  }
  // a DeepSpeed config pasted in fills the inputs as the trainer's parser resolves it
  {
    await setInputs(page, { model: 'd24', world: '4' });
    const ds = { train_batch_size: 64, train_micro_batch_size_per_gpu: 4, zero_optimization: { stage: 3, offload_optimizer: { device: 'nvme' } },
                 bf16: { enabled: true }, optimizer: { type: 'Lion', params: { lr: 1e-4 } }, activation_checkpointing: { partition_activations: true } };
    await page.$eval('#ds-config', (e, v) => { e.value = v; }, JSON.stringify(ds));
    await page.click('#ds-apply');
    const v = await page.evaluate(() => Object.fromEntries(['precision', 'optimizer', 'zero-stage', 'batch', 'grad-accum', 'offload-optimizer', 'recompute']
      .map(k => [k, document.querySelector(`[name="${k}"]`).value])));
    const want = { precision: 'bf16', optimizer: 'lion', 'zero-stage': '3', batch: '4', 'grad-accum': '4', 'offload-optimizer': 'nvme', recompute: 'full' };
    expect(JSON.stringify(v) === JSON.stringify(want), `DeepSpeed config: the inputs say ${JSON.stringify(v)}, expected ${JSON.stringify(want)}`);
    const s = await shown(page);
    const t = runTrainer(['--plan', '--model', 'd24', '--world', '4', '--precision', 'bf16', '--optimizer', 'lion', '--zero-stage', '3', '--batch', '4',
                          '--grad-accum', '4', '--offload-optimizer', 'nvme', '--recompute', 'full', '--threads', THREADS, '--hardware', 'this-machine', '--time', '--json']);
    expect(t.rc === 0 && s['device-bytes'] === String(JSON.parse(t.out).device), `DeepSpeed config: device-bytes ${s['device-bytes']}, the trainer ${t.out}`);
    // a config the trainer refuses: its error line, word for word
    const bad = '{"train_micro_batch_size_per_gpu": 4,\n "zero_optimization": {"stage": 2,, }';
    fs.writeFileSync(path.join(scratch, 'bad_ds.json'), bad);
    let err = '';
    try { execFileSync(trainer, ['--deepspeed', path.join(scratch, 'bad_ds.json')], { stdio: ['ignore', 'pipe', 'pipe'], encoding: 'utf8', timeout: 60000 }); }
    catch (e) { err = e.stderr.split('\n').find(l => l.startsWith('error')) || ''; }
    await page.$eval('#ds-config', (e, v) => { e.value = v; }, bad);
    await page.click('#ds-apply');
    const pageErr = await page.$eval('#ds-error', e => e.textContent);
    expect(err !== '' && pageErr === err.replace(path.join(scratch, 'bad_ds.json'), '/ds_config.json'),
           `bad DeepSpeed config: the page says '${pageErr}', the trainer '${err}'`);
    console.log('ok DeepSpeed config: ' + JSON.stringify(v) + '; refused: ' + pageErr);
  }

  // typed-in hardware: the page writes the description to a file the planner reads; the trainer
  // reads the same text from a file here. And a description it refuses shows its error line.
  {
    await setInputs(page, { model: 'd36', precision: 'bf16', 'zero-stage': '3', world: '16', hardware: 'custom' });
    const edit = await page.$eval('#hardware-json', e => e.value);
    const hw = JSON.parse(edit);
    hw.peak_flops_bf16 = 500e12; hw.devices_per_node = 4; hw.name = 'typed';
    await page.$eval('#hardware-json', (e, v) => { e.value = v; e.dispatchEvent(new Event('change', { bubbles: true })); }, JSON.stringify(hw));
    const file = path.join(scratch, 'hw.json');
    fs.writeFileSync(file, JSON.stringify(hw));
    const t = runTrainer(['--plan', '--model', 'd36', '--precision', 'bf16', '--zero-stage', '3', '--world', '16', '--hardware', file, '--threads', THREADS, '--time', '--json']);
    const s = await shown(page);
    expect(t.rc === 0 && s['step-ms'] === rawNumber(t.out, 'step_ms') && s['device-bytes'] === String(JSON.parse(t.out).device),
           `typed-in hardware: step-ms ${s['step-ms']}, the trainer ${t.rc === 0 ? rawNumber(t.out, 'step_ms') : t.err}`);
    delete hw.memory_bandwidth;
    await page.$eval('#hardware-json', (e, v) => { e.value = v; e.dispatchEvent(new Event('change', { bubbles: true })); }, JSON.stringify(hw));
    fs.writeFileSync(file, JSON.stringify(hw));
    const bad = runTrainer(['--plan', '--model', 'd36', '--hardware', file, '--threads', THREADS, '--time', '--json']);
    const s2 = await shown(page);
    expect(bad.rc !== 0 && s2.error === bad.err.replace(file, '/hardware.json'), `typed-in hardware without memory_bandwidth: the page says '${s2.error}', the trainer '${bad.err}'`);
    console.log(`ok typed-in hardware: ${s['step-ms']} ms; refused: ${s2.error}`);
  }

  // --fit: the largest model of the ladder that fits in N GB with the page's settings
  {
    await setInputs(page, { model: 'd12', precision: 'bf16', 'zero-stage': '3', world: '64', 'offload-optimizer': 'cpu', hardware: 'h100-80gb-sxm' });
    await page.click('#fit-gb', { clickCount: 3 });
    await page.keyboard.press('Backspace');
    await page.type('#fit-gb', '40');
    await page.keyboard.press('Tab');
    const got = await page.$eval('#fit-largest', e => e.textContent);
    const t = runTrainer(['--plan', '--precision', 'bf16', '--zero-stage', '3', '--world', '64', '--offload-optimizer', 'cpu', '--threads', THREADS, '--fit', '40G', '--json']);
    const want = t.rc === 0 ? JSON.parse(t.out).largest : t.err;
    expect(got === want, `--fit 40G: the page says '${got}', the trainer '${want}'`);
    console.log(`ok --fit 40G: ${got}`);
  }

  // a real 2-rank run's --log draws beside the prediction, its configuration becomes the inputs
  // (they are set to another one first), and the prediction for it is what its ranks allocated
  if (process.env.RUN_LOG) {
    await setInputs(page, { model: 'd48', 'zero-stage': '3', world: '8', precision: 'bf16', batch: '4', 'seq-len': '1024' });
    const input = await page.$('#run-file');
    await input.uploadFile(process.env.RUN_LOG);
    await page.waitForSelector('body[data-run]', { timeout: 10000 });
    const lines = fs.readFileSync(process.env.RUN_LOG, 'utf8').split('\n').filter(l => l.trim()).map(l => JSON.parse(l));
    const steps = lines.filter(e => e.step !== undefined && e.loss !== undefined && e.event === undefined);
    const mem = lines.filter(e => e.event === 'memory');
    const r = await page.evaluate(() => ({
      run: document.body.dataset.run, points: window.runChart ? window.runChart.data.datasets[0].data.length : -1,
      ranks: [...document.querySelectorAll('#run-memory tbody tr')].map(tr => tr.cells[1].textContent),
      predicted: document.getElementById('device-bytes').textContent, summary: document.getElementById('run-summary').textContent,
      verdicts: [...document.querySelectorAll('#run-memory tbody tr')].map(tr => tr.cells[4].textContent),
      inputs: Object.fromEntries(['model-choice', 'layers', 'channels', 'heads', 'seq-len', 'batch', 'zero-stage', 'world', 'precision']
        .map(k => [k, (document.getElementById(k) || document.forms.inputs.elements.namedItem(k)).value])),
      url: location.search,
    }));
    const want = { 'model-choice': 'shape', layers: '2', channels: '64', heads: '2', 'seq-len': '32', batch: '2', 'zero-stage': '2', world: '2', precision: 'fp32' };
    expect(JSON.stringify(r.inputs) === JSON.stringify(want), `--log: the inputs became ${JSON.stringify(r.inputs)}, the run's configuration is ${JSON.stringify(want)}`);
    expect(r.verdicts.every(v => v === 'equal'), `--log: the page's verdicts ${r.verdicts}`);
    expect(r.run === 'log' && r.points === steps.length && steps.length > 0, `--log: drawn ${r.run} with ${r.points} points, the log has ${steps.length} steps`);
    expect(mem.length === 2 && JSON.stringify(r.ranks) === JSON.stringify(mem.map(m => String(m.device))), `--log: ranks ${r.ranks}, the log ${mem.map(m => m.device)}`);
    expect(mem.every(m => String(m.device) === r.predicted), `--log: the page predicts ${r.predicted}, the ranks allocated ${mem.map(m => m.device)}`);
    console.log(`ok --log of a 2-rank run: ${r.summary.slice(0, 100)}; inputs ${r.url}; allocated ${r.ranks} = predicted ${r.predicted}`);
  }

  // "what changed" when one input moves
  {
    await setInputs(page, { model: 'd48', 'zero-stage': '2', world: '8', precision: 'bf16', hardware: 'h100-80gb-sxm' });
    await page.select('[name="zero-stage"]', '3');
    const line = await page.$eval('#changed', e => e.textContent);
    expect(/^zero-stage 2 → 3: −[0-9.]+ GB per rank on the device/.test(line), `what changed: '${line}'`);
    console.log('ok what changed: ' + line);
    if (screenshot) await page.screenshot({ path: screenshot, fullPage: true });
  }

  expect(foreign.length === 0, `the page asked for something outside its folder: ${foreign.join(' ')}`);
  planMs.sort((a, b) => a - b);
  const median = planMs[planMs.length >> 1], max = planMs[planMs.length - 1];
  console.log(`per plan in the page: median ${median.toFixed(1)} ms, max ${max.toFixed(1)} ms`);
  expect(median < 50, `a plan takes ${median.toFixed(1)} ms (median) in the page: over 50 ms`);
  await browser.close();
  console.log(`${checks - failures} of ${checks} checks passed`);
  process.exit(failures ? 1 : 0);
})().catch(e => { console.log('FAIL: ' + (e.stack || e)); process.exit(1); });
