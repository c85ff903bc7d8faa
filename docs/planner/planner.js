// docs/planner/planner.js: the planner page. The inputs make a command line for `train_gpt_cpu --plan`
// (their names are its option names), planner.wasm runs it (wasi.js), and the page draws what
// its --json says. Nothing here computes a byte or a millisecond: every number shown is the
// planner's. The state lives in the URL: ?model=d48&zero-stage=3&world=64 (the options given,
// without their dashes).
'use strict';

const GPT3 = { // the GPT-3 paper's shapes (heads chosen so that they divide the channels), context 2048
  'gpt3-350m': [24, 1024, 16], 'gpt3-760m': [24, 1536, 16], 'gpt3-1.3b': [24, 2048, 16], 'gpt3-2.7b': [32, 2560, 32],
  'gpt3-6.7b': [32, 4096, 32], 'gpt3-13b': [40, 5120, 40], 'gpt3-175b': [96, 12288, 96],
};
const PRESETS = ['d12', 'd24', 'd36', 'd48'];
const SHAPE = ['layers', 'channels', 'heads', 'vocab-size', 'max-seq-len'];
const TRAINING = ['precision', 'optimizer', 'zero-stage', 'world', 'batch', 'seq-len', 'recompute', 'recompute-every',
  'cpu-checkpointing', 'offload-optimizer', 'offload-param', 'threads'];
const TIME = ['hardware', 'gpus-per-node', 'network', 'grad-accum'];
const THREADS_DEFAULT = '1'; // the page's: a browser cannot know the trainer's cores
// The GPU description a typed-in one starts from (run/timemodel.h's keys; h100-80gb-sxm's values).
const HARDWARE_TEMPLATE = {
  name: 'my-gpu', peak_flops_fp32: 67e12, peak_flops_bf16: 989e12, peak_flops_fp16: 989e12, memory_bandwidth: 3.35e12,
  matmul_efficiency: 0.75, memory_efficiency: 0.8, intra_node_bandwidth: 450e9, intra_node_latency: 5e-6,
  inter_node_bandwidth: 50e9, inter_node_latency: 10e-6, collective_launch_latency: 5e-6, devices_per_node: 8, cores: 0,
  shared: 0, inline_comm: 0, pcie_bandwidth: 64e9, host_bandwidth: 50e9, nvme_bandwidth: 3e9,
};
const COLORS = ['#4e79a7', '#f28e2b', '#e15759', '#76b7b2', '#59a14f', '#edc948', '#b07aa1', '#ff9da7', '#9c755f', '#bab0ac'];

const $ = id => document.getElementById(id);
const form = $('inputs');
const field = name => form.elements.namedItem(name);
let module = null, defaults = {}, chart = null, previous = null;
const defaultsBy = {}; // the planner's defaults for each trainer (the GPU trainer's precision is its build's)
const trainer = () => $('trainer').value;
const cpu = () => trainer() === 'train_gpt_cpu';

function runPlanner(args, files) {
  const enc = new TextEncoder(), fs = {};
  for (const [k, v] of Object.entries(files || {})) fs[k] = enc.encode(v);
  const t0 = performance.now();
  const r = wasiRun(module, args[0] === '--ds-config' ? ['planner', ...args] : [trainer(), '--plan', ...args], fs);
  r.ms = performance.now() - t0;
  return r;
}

// ---------------------------------------------------------------------------------------
// Inputs <-> options

function modelChoice() { return $('model-choice').value; }

// The options the inputs give, as [name, value] pairs (value null for a flag), defaults left out.
function options() {
  const opts = [], choice = modelChoice();
  const val = name => { const e = field(name); return e.type === 'checkbox' ? (e.checked ? '' : null) : e.value.trim(); };
  if (PRESETS.includes(choice)) opts.push(['model', choice]);
  else if (choice === 'params') {
    opts.push(['params', val('params')]);
    for (const k of ['layers', 'channels', 'heads']) if (val(k) !== '') opts.push([k, val(k)]);
  } else for (const k of SHAPE) // (layers, channels and heads always: they say it is a shape)
    if (val(k) !== '' && (val(k) !== defaults[k] || SHAPE.indexOf(k) < 3)) opts.push([k, val(k)]);
  for (const k of TRAINING) {
    const v = val(k);
    if (v === null || v === '' && k !== 'cpu-checkpointing') continue;
    if (k === 'cpu-checkpointing') { opts.push([k, null]); continue; }
    if (k === 'threads' ? cpu() && v !== THREADS_DEFAULT : v !== defaults[k]) opts.push([k, v]);
  }
  if (choice !== 'params') for (const k of TIME) {
    const v = k === 'hardware' && field(k).value === 'custom' ? 'custom' : val(k);
    if (v !== '' && v !== defaults[k]) opts.push([k, v]);
  }
  return opts;
}

// The planner's command line for those options (plus --threads, --time and --json, always).
function commandLine(opts) {
  const args = [], files = {};
  for (const [k, v] of opts) {
    if (k === 'hardware' && v === 'custom') { args.push('--hardware', '/hardware.json'); files['hardware.json'] = $('hardware-json').value; continue; }
    args.push('--' + k);
    if (v !== null) args.push(v);
  }
  if (cpu() && !opts.some(([k]) => k === 'threads')) args.push('--threads', THREADS_DEFAULT);
  if (modelChoice() !== 'params') args.push('--time');
  args.push('--json');
  return { args, files };
}

function setField(name, value) {
  const e = field(name);
  if (e.type === 'checkbox') e.checked = value !== null && value !== undefined && value !== false && value !== 'off';
  else e.value = value === undefined || value === null ? '' : value;
}

// The URL's state: option names without dashes as keys.
function toURL(opts) {
  const q = new URLSearchParams();
  if (!cpu()) q.append('trainer', trainer());
  for (const [k, v] of opts) q.append(k, v === null ? '' : v);
  if (opts.some(([k, v]) => k === 'hardware' && v === 'custom')) q.set('hardware-json', $('hardware-json').value);
  const s = q.toString();
  history.replaceState(null, '', s ? '?' + s : location.pathname);
}

function fromURL() {
  const q = new URLSearchParams(location.search);
  if (q.get('trainer') === 'train_gpt') { $('trainer').value = 'train_gpt'; setDefaults(); }
  for (const k of [...TRAINING, ...TIME]) if (q.has(k)) setField(k, k === 'cpu-checkpointing' ? true : q.get(k));
  if (q.has('hardware-json')) $('hardware-json').value = q.get('hardware-json');
  if (q.has('model')) $('model-choice').value = q.get('model');
  else if (q.has('params')) { $('model-choice').value = 'params'; setField('params', q.get('params')); }
  if (q.has('layers') || q.has('channels') || q.has('heads')) {
    for (const k of SHAPE) if (q.has(k)) setField(k, q.get(k));
    if (!q.has('params')) $('model-choice').value = matchGPT3() || 'shape';
  }
}

function matchGPT3() {
  for (const [name, [L, C, H]] of Object.entries(GPT3))
    if (field('layers').value == L && field('channels').value == C && field('heads').value == H &&
        field('max-seq-len').value === '2048' && (field('vocab-size').value === '' || field('vocab-size').value === defaults['vocab-size']))
      return name;
  return null;
}

function modelChanged() {
  const choice = modelChoice();
  if (GPT3[choice]) {
    const [L, C, H] = GPT3[choice];
    setField('layers', L); setField('channels', C); setField('heads', H); setField('max-seq-len', 2048); setField('vocab-size', '');
  }
  showFields();
}

function showFields() {
  const choice = modelChoice();
  $('shape-fields').classList.toggle('hidden', PRESETS.includes(choice) || GPT3[choice] !== undefined);
  $('params-field').classList.toggle('hidden', choice !== 'params');
  $('time-fields').classList.toggle('hidden', choice === 'params');
  $('time-out').classList.toggle('hidden', choice === 'params');
  $('hardware-json').classList.toggle('hidden', field('hardware').value !== 'custom');
  field('threads').closest('label').classList.toggle('hidden', !cpu());
  if (field('hardware').value === 'custom' && !$('hardware-json').value)
    $('hardware-json').value = JSON.stringify(HARDWARE_TEMPLATE, null, 1);
}

// ---------------------------------------------------------------------------------------
// Output

const GB = b => (b / 1e9).toLocaleString('en', { maximumFractionDigits: 3 }) + ' GB';

function showError(text) {
  $('error').textContent = text;
  $('error').classList.toggle('hidden', !text);
  document.body.dataset.state = text ? 'error' : 'ok';
}

function render(p) {
  for (const loc of ['device', 'host', 'nvme']) {
    $(loc + '-bytes').textContent = String(p[loc]);
    $(loc + '-human').textContent = GB(p[loc]);
  }
  const timed = p.step_ms !== undefined;
  $('step-ms').textContent = timed ? String(p.step_ms) : '-';
  $('step-note').textContent = timed ? `${p.hardware}, ${p.per_node} per node` : 'needs a GPT-2 shape';
  if (timed) {
    for (const k of ['fwd', 'bwd', 'optim', 'exposed_comm', 'comm']) $(k.replace('_', '-') + '-ms').textContent = String(p[k + '_ms']);
    $('tokens-per-s').textContent = String(p.tokens_per_s);
    $('mfu').textContent = String(p.mfu);
  }
  // the kinds, by where they live
  const body = $('kinds').tBodies[0];
  body.textContent = '';
  for (const k of p.kinds) {
    const tr = body.insertRow();
    tr.id = 'kind-' + k;
    const b = p[k];
    for (const text of [k, p.where[k], b === null ? 'unknown' : String(b), b === null ? '' : GB(b)]) tr.insertCell().textContent = text;
  }
  const locs = ['device', 'host', 'nvme'];
  const datasets = p.kinds.map((k, i) => ({
    label: k, backgroundColor: COLORS[i % COLORS.length],
    data: locs.map(l => (p.where[k] === l && p[k] ? p[k] : 0)),
  })).filter(d => d.data.some(x => x > 0));
  const data = { labels: locs.map(l => `${l}: ${GB(p[l])}`), datasets };
  if (typeof Chart === 'undefined') { /* the chart library failed to load: the numbers still stand */ }
  else if (!chart) {
    chart = new Chart($('chart'), {
      type: 'bar', data,
      options: {
        indexAxis: 'y', animation: false, maintainAspectRatio: false,
        scales: { x: { stacked: true, ticks: { callback: v => GB(v) } }, y: { stacked: true } },
        plugins: { tooltip: { callbacks: { label: c => `${c.dataset.label}: ${c.raw} bytes (${GB(c.raw)})` } } },
      },
    });
  } else { chart.data = data; chart.update(); }
  // the textbook line
  const P = p.num_params, K = p.bytes_per_param.K, pb = p.bytes_per_param.params, gb = p.bytes_per_param.grads;
  $('textbook').textContent = `Textbook (ZeRO paper, ${P.toLocaleString('en')} parameters, (${pb} + ${gb} + K=${K})·P split by stage ${p.input.zero_stage} over ${p.input.world} ranks): ` +
    `${GB(p.model_states_textbook)} of model states per rank` +
    (p.activations_textbook ? `; activations by Korthikanti et al.: ${GB(p.activations_textbook)}` : '') +
    (p.exact ? '. The planner\'s own layout: ' + GB(p.model_states) + ' of model states.' : ' (a bare count: textbook only).');
}

function describeChange(prev, cur, what) {
  if (!prev || !what) return '';
  const parts = [];
  const d = cur.device - prev.device;
  if (d) parts.push(`${d < 0 ? '−' : '+'}${GB(Math.abs(d))} per rank on the device`);
  const h = cur.host - prev.host;
  if (h) parts.push(`${h < 0 ? '−' : '+'}${GB(Math.abs(h))} in host memory`);
  if (cur.step_ms !== undefined && prev.step_ms !== undefined) {
    const s = cur.step_ms - prev.step_ms, e = cur.exposed_comm_ms - prev.exposed_comm_ms;
    if (Math.abs(s) > 1e-9) parts.push(`${s < 0 ? '−' : '+'}${Math.abs(s).toPrecision(3)} ms per step`);
    if (Math.abs(e) > 1e-9) parts.push(`${e < 0 ? '−' : '+'}${Math.abs(e).toPrecision(3)} ms exposed communication`);
  }
  return `${what}: ${parts.length ? parts.join(', ') : 'no change'}`;
}

// The predicted timeline: the Chrome trace the planner's --trace wrote, one row per stream
// (or a real run's --trace, on another canvas).
function drawTimeline(traceText, canvas) {
  const c = canvas || $('timeline'), g = c.getContext('2d');
  let trace;
  try { trace = JSON.parse(traceText); } catch (e) { return; }
  const events = (trace.traceEvents || trace).filter(e => e.ph === 'X' && e.name !== 'step');
  const names = new Map();
  for (const e of (trace.traceEvents || trace)) if (e.ph === 'M' && e.name === 'thread_name' && e.pid === 0) names.set(e.tid, e.args.name);
  const tids = [...new Set(events.filter(e => e.pid === 0).map(e => e.tid))].sort((a, b) => a - b);
  const end = Math.max(...events.map(e => e.ts + e.dur));
  const rowH = tids.length > 6 ? 14 : 28;
  c.height = 24 + rowH * tids.length; // (resizing clears it)
  const left = 80, w = c.width - left - 10;
  const color = { forward: '#4e79a7', backward: '#f28e2b', optimizer: '#59a14f', comm: '#e15759', wait: '#ddd' };
  g.font = (rowH < 20 ? 10 : 12) + 'px sans-serif';
  tids.forEach((tid, row) => {
    const y = 4 + row * rowH;
    g.fillStyle = '#333';
    g.fillText(names.get(tid) || `stream ${tid}`, 4, y + rowH / 2 + 4);
    for (const e of events) {
      if (e.pid !== 0 || e.tid !== tid || e.name === 'forward_pass' || e.name === 'backward_pass') continue;
      g.fillStyle = color[e.cat] || '#b07aa1';
      g.fillRect(left + e.ts / end * w, y + (e.cat === 'wait' ? rowH * 0.6 : 2), Math.max(0.5, e.dur / end * w), e.cat === 'wait' ? rowH * 0.3 : rowH - 6);
    }
  });
  g.fillStyle = '#333';
  g.fillText(`${(end / 1e3).toPrecision(4)} ms`, c.width - 70, c.height - 4);
}

// "The largest model that fits in N GB": the planner's --fit ladder with these settings.
function updateFit(opts) {
  const gb = $('fit-gb').value.trim();
  if (!gb) { $('fit-largest').textContent = ''; return; }
  const skip = new Set(['model', 'params', ...SHAPE, ...TIME]);
  const args = ['--fit', gb + 'G', '--json'];
  for (const [k, v] of opts) if (!skip.has(k)) { args.push('--' + k); if (v !== null) args.push(v); }
  if (cpu() && !opts.some(([k]) => k === 'threads')) args.push('--threads', THREADS_DEFAULT);
  const r = runPlanner(args, {});
  if (r.rc !== 0) { $('fit-largest').textContent = r.stderr.trim().split('\n').filter(l => l.startsWith('error')).join(' ') || 'error'; return; }
  const f = JSON.parse(r.stdout), best = f.models.filter(m => m.fits).pop();
  $('fit-largest').textContent = best ? best.model : 'none';
  $('fit-detail').textContent = best ? ` (${best.num_params.toLocaleString('en')} parameters, ${GB(best.device)} on the device per rank)` : '';
}

function update(what) {
  const opts = options();
  toURL(opts);
  updateFit(opts);
  const { args, files } = commandLine(opts);
  const timed = args.includes('--time');
  if (timed) args.splice(args.indexOf('--time') + 1, 0, '--trace', '/trace.json');
  const r = runPlanner(args, files);
  const shown = args.filter((a, i) => a !== '--trace' && args[i - 1] !== '--trace');
  $('cmdline').textContent = `./${trainer()} --plan ` + shown.map(a => (/^[\w.\/=:+-]+$/.test(a) ? a : `'${a}'`)).join(' ');
  $('timing').textContent = `planned in ${r.ms.toFixed(1)} ms`;
  document.body.dataset.planMs = r.ms.toFixed(2);
  if (r.rc !== 0) {
    const text = r.trap
      ? 'error: a count in this configuration does not fit the 32 bits of a C library call or a long in this WebAssembly ' +
        'build (planner.wasm stopped rather than print a wrapped number): run the command below with ./train_gpt_cpu'
      : r.stderr.trim().split('\n').filter(l => l.startsWith('error')).join('\n') || r.stderr.trim();
    showError(text);
    for (const id of ['device-bytes', 'host-bytes', 'nvme-bytes', 'step-ms']) $(id).textContent = '-';
    return;
  }
  showError('');
  const p = JSON.parse(r.stdout);
  render(p);
  if (timed && r.files['trace.json']) drawTimeline(new TextDecoder().decode(r.files['trace.json']));
  $('changed').textContent = describeChange(previous, p, what);
  previous = p;
}

function fieldLabel(e) {
  if (e.id === 'model-choice') return 'model';
  if (e.id === 'trainer') return 'trainer';
  return e.name || e.id;
}
function onChange(ev) {
  const e = ev.target;
  if (e.id === 'ds-config') return;
  if (e.id === 'model-choice') modelChanged();
  if (e.id === 'trainer') switchTrainer();
  showFields();
  const before = previous ? describeInput(e) : null;
  update(before);
}
let lastValues = {};
function describeInput(e) {
  const name = fieldLabel(e), v = e.type === 'checkbox' ? (e.checked ? 'on' : 'off') : e.value;
  const old = lastValues[name];
  lastValues[name] = v;
  return old === undefined ? `${name} ${v}` : `${name} ${old} → ${v}`;
}
function remember() {
  lastValues = {};
  for (const e of form.elements) if (e.name || e.id === 'model-choice' || e.id === 'trainer')
    lastValues[fieldLabel(e)] = e.type === 'checkbox' ? (e.checked ? 'on' : 'off') : e.value;
}

// The DeepSpeed config box: the trainer's parser (run/ds_config.h) resolves it, through
// planner.wasm's --ds-config, into the options it sets; they fill the inputs.
function applyDeepSpeed() {
  const world = field('world').value || '1';
  const r = runPlanner(['--ds-config', '/ds_config.json', world], { 'ds_config.json': $('ds-config').value });
  const lines = r.stderr.trim();
  if (r.rc !== 0) { $('ds-error').textContent = lines.split('\n').filter(l => l.startsWith('error')).join('\n') || lines; document.body.dataset.ds = 'error'; return; }
  const out = r.stdout.split('\n');
  for (let i = 0; i + 1 < out.length; i += 2) setField(out[i].replace(/^--/, ''), out[i + 1]);
  $('ds-error').textContent = lines ? lines : 'filled in from the config';
  document.body.dataset.ds = 'ok';
  showFields();
  update('the DeepSpeed config');
  remember();
}

// A real run: its --log (JSON lines: step lines with the loss and times, "memory" events with
// each rank's allocation by kind) or its --trace (drawn as the prediction is).
let runChart = null;
function loadRun(text, name) {
  $('run-timeline').classList.add('hidden');
  if (/^\s*\{\s*"traceEvents"/.test(text)) {
    $('run-timeline').classList.remove('hidden');
    drawTimeline(text, $('run-timeline'));
    $('run-summary').textContent = `${name}: the run's timeline (rank 0)`;
    document.body.dataset.run = 'trace';
    return;
  }
  const steps = [], memory = [], events = [];
  let bad = 0;
  for (const line of text.split('\n')) {
    if (!line.trim()) continue;
    let e;
    try { e = JSON.parse(line); } catch (err) { bad++; continue; }
    if (e.event !== undefined) events.push(e);
    if (e.step !== undefined && e.loss !== undefined && e.event === undefined) steps.push(e);
    else if (e.event === 'memory') memory.push(e);
  }
  if (!steps.length && !memory.length) {
    $('run-summary').textContent = `error: ${name}: no step lines and no memory events: not a --log or --trace file`;
    document.body.dataset.run = 'error';
    return;
  }
  const config = events.find(e => e.event === 'config');
  if (config) applyRunConfig(config);
  const later = steps.slice(1), mean = later.length ? later.reduce((s, e) => s + e.ms, 0) / later.length : NaN;
  $('run-summary').textContent = `${name}: ${steps.length} steps` +
    (steps.length ? `, loss ${steps[0].loss} → ${steps[steps.length - 1].loss}` : '') +
    (config ? ' (the inputs above are now its configuration)' : '') +
    (later.length ? `, ${mean.toFixed(1)} ms per step after the first (predicted above: ${$('step-ms').textContent} ms)` : '') +
    (bad ? ` (${bad} lines not JSON)` : '');
  $('run-box').classList.toggle('hidden', !steps.length);
  const data = { labels: steps.map(e => e.step), datasets: [{ label: 'loss', data: steps.map(e => e.loss), borderColor: COLORS[0], pointRadius: 0 }] };
  if (typeof Chart !== 'undefined') {
    if (runChart) runChart.destroy();
    runChart = new Chart($('run-loss'), { type: 'line', data, options: { animation: false, maintainAspectRatio: false, scales: { x: { title: { display: true, text: 'step' } } } } });
    window.runChart = runChart;
  }
  const body = $('run-memory').tBodies[0];
  body.textContent = '';
  $('run-memory').classList.toggle('hidden', !memory.length);
  for (const m of memory) {
    const tr = body.insertRow();
    tr.id = 'run-rank-' + m.rank;
    const total = m.total !== undefined ? m.total : m.device, predicted = $('device-bytes').textContent;
    const verdict = !config ? '' : String(total) === predicted ? 'equal' : `differs by ${total - Number(predicted)} bytes`;
    for (const t of [String(m.rank), String(total), GB(total), config ? predicted : '', verdict]) tr.insertCell().textContent = t;
  }
  document.body.dataset.run = 'log';
}

// A --log's "config" event (run/config.h: every setting with its value and source) into the
// inputs, so that the prediction beside the run is for the run's own configuration. The page's
// --threads stays its own (a log does not say how many cores the run had).
function applyRunConfig(config) {
  const s = config.settings || {}, value = k => (s[k] && s[k].value !== null && s[k].value !== undefined ? s[k].value : null);
  if (value('model') !== null && PRESETS.includes(value('model'))) $('model-choice').value = value('model');
  else if (value('layers') !== null) {
    for (const k of SHAPE) if (value(k) !== null) setField(k, String(value(k)));
    $('model-choice').value = matchGPT3() || 'shape';
  }
  if (config.world) setField('world', String(config.world));
  for (const k of [...TRAINING, 'grad-accum']) {
    if (k === 'threads' || k === 'world' || value(k) === null) continue;
    setField(k, k === 'cpu-checkpointing' ? value(k) : String(value(k)));
  }
  showFields();
  update("the run's configuration");
  remember();
}

// The current trainer's defaults into the inputs (a new trainer starts from its own defaults,
// as a new command line would).
function setDefaults() {
  defaults = defaultsBy[trainer()];
  for (const [k, v] of Object.entries(defaults)) if (!SHAPE.includes(k)) setField(k, v);
  for (const k of SHAPE) field(k).placeholder = defaults[k];
}

// Another trainer: the inputs left at the old one's defaults take the new one's (precision:
// the GPU trainer's is its build's, bf16); what the user set stays.
function switchTrainer() {
  const old = defaults;
  defaults = defaultsBy[trainer()];
  for (const [k, v] of Object.entries(defaults)) {
    if (SHAPE.includes(k)) { field(k).placeholder = v; continue; }
    const e = field(k);
    if (e.value === old[k]) setField(k, v);
  }
}

async function main() {
  const bytes = await (await fetch('planner.wasm')).arrayBuffer();
  module = await WebAssembly.compile(bytes);
  for (const t of ['train_gpt_cpu', 'train_gpt']) {
    $('trainer').value = t;
    const d = runPlanner(['--time', '--json'], {});
    const p = JSON.parse(d.stdout), i = p.input;
    defaultsBy[t] = {
      precision: i.precision, optimizer: i.optimizer, 'zero-stage': String(i.zero_stage), world: String(i.world),
      batch: String(i.batch), 'seq-len': String(i.seq_len), recompute: i.recompute, 'recompute-every': String(i.recompute_every),
      'offload-optimizer': i.offload_optimizer === 'device' ? 'none' : i.offload_optimizer,
      'offload-param': i.offload_param === 'device' ? 'none' : i.offload_param,
      layers: String(i.num_layers), channels: String(i.channels), heads: String(i.num_heads),
      'vocab-size': String(i.vocab_size), 'max-seq-len': String(i.max_seq_len),
      hardware: p.hardware, 'grad-accum': String(p.grad_accum), network: '', 'gpus-per-node': '',
    };
  }
  $('trainer').value = 'train_gpt_cpu';
  setDefaults();
  setField('threads', THREADS_DEFAULT);
  $('model-choice').value = 'd12';
  fromURL();
  showFields();
  form.addEventListener('change', onChange);
  $('ds-apply').addEventListener('click', applyDeepSpeed);
  $('fit-gb').addEventListener('change', () => updateFit(options()));
  $('run-file').addEventListener('change', async ev => {
    const f = ev.target.files[0];
    if (f) loadRun(await f.text(), f.name);
  });
  update(null);
  remember();
  document.body.dataset.ready = '1';
}

main().catch(e => { showError('error: the planner did not load: ' + e + (location.protocol === 'file:' ? ' (serve the folder: scripts/serve_planner.sh)' : '')); });
