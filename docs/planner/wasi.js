// docs/planner/wasi.js: runs planner.wasm (web/planner_wasm.c: `train_gpt_cpu --plan` built for
// wasm32-wasi) as a command, as a shell would: argv in, exit code, stdout and stderr out.
// Browsers have no WASI, so this is the part of WASI preview 1 that the program imports: one
// preopened directory "/" holding in-memory files (a hardware description or DeepSpeed config
// the page writes, the --trace the planner writes), the three standard streams, a clock, an
// empty environment.
// Each run gets a fresh instance of the compiled module: no state survives from one plan to the
// next, exactly as with two runs of the trainer.
'use strict';

const WASI_ESUCCESS = 0, WASI_EBADF = 8, WASI_EINVAL = 28, WASI_ENOENT = 44, WASI_ENOSYS = 52, WASI_EEXIST = 20;
const PREOPEN_FD = 3;

class WasiExit { constructor(code) { this.code = code; } }

// files: an object path -> Uint8Array (paths without the leading "/"); returns
// {rc, stdout, stderr, files} where files also holds what the program wrote.
function wasiRun(module, args, files) {
  files = Object.assign({}, files || {});
  const out = [[], [], []]; // byte chunks of fds 0..2 (0 unused)
  const fds = new Map();    // open files: fd -> {path, pos, append}
  let nextFd = PREOPEN_FD + 1;
  let memory = null;
  const enc = new TextEncoder();
  const argBytes = args.map(a => enc.encode(a + '\0'));
  const view = () => new DataView(memory.buffer);
  const bytes = () => new Uint8Array(memory.buffer);
  const str = (ptr, len) => new TextDecoder().decode(bytes().slice(ptr, ptr + len));
  const iovecs = (iovs, n) => {
    const v = view(), list = [];
    for (let i = 0; i < n; i++) list.push([v.getUint32(iovs + 8 * i, true), v.getUint32(iovs + 8 * i + 4, true)]);
    return list;
  };
  const writeAt = (f, pos, chunk) => {
    let data = files[f.path];
    if (pos + chunk.length > data.length) {
      const grown = new Uint8Array(Math.max(pos + chunk.length, data.length * 2));
      grown.set(data);
      grown.used = data.used === undefined ? data.length : data.used;
      data = files[f.path] = grown;
    }
    data.set(chunk, pos);
    data.used = Math.max(data.used === undefined ? data.length : data.used, pos + chunk.length);
  };
  const size = path => { const d = files[path]; return d.used === undefined ? d.length : d.used; };

  const imports = {
    args_sizes_get(argc, bufSize) {
      const v = view();
      v.setUint32(argc, argBytes.length, true);
      v.setUint32(bufSize, argBytes.reduce((s, a) => s + a.length, 0), true);
      return WASI_ESUCCESS;
    },
    args_get(argv, buf) {
      const v = view(), b = bytes();
      for (const a of argBytes) { v.setUint32(argv, buf, true); argv += 4; b.set(a, buf); buf += a.length; }
      return WASI_ESUCCESS;
    },
    // an empty environment (the trainer's headers read test knobs from it: none apply on a page)
    environ_sizes_get(count, bufSize) {
      const v = view();
      v.setUint32(count, 0, true);
      v.setUint32(bufSize, 0, true);
      return WASI_ESUCCESS;
    },
    environ_get(environ, buf) { return WASI_ESUCCESS; },
    clock_time_get(id, precision, time) {
      view().setBigUint64(time, BigInt(Math.round((id === 0 ? Date.now() : performance.now()) * 1e6)), true);
      return WASI_ESUCCESS;
    },
    fd_prestat_get(fd, buf) {
      if (fd !== PREOPEN_FD) return WASI_EBADF;
      const v = view();
      v.setUint8(buf, 0);
      v.setUint32(buf + 4, 1, true);
      return WASI_ESUCCESS;
    },
    fd_prestat_dir_name(fd, path, len) {
      if (fd !== PREOPEN_FD) return WASI_EBADF;
      if (len >= 1) bytes()[path] = 0x2f; // "/"
      return WASI_ESUCCESS;
    },
    fd_fdstat_get(fd, buf) {
      const type = fd <= 2 ? 2 : fd === PREOPEN_FD ? 3 : fds.has(fd) ? 4 : -1;
      if (type < 0) return WASI_EBADF;
      const v = view();
      v.setUint8(buf, type);
      v.setUint16(buf + 2, 0, true);
      v.setBigUint64(buf + 8, 0xffffffffffffffffn, true);
      v.setBigUint64(buf + 16, 0xffffffffffffffffn, true);
      return WASI_ESUCCESS;
    },
    fd_fdstat_set_flags() { return WASI_ESUCCESS; },
    fd_filestat_get(fd, buf) {
      const f = fds.get(fd);
      if (!f && fd > 2 && fd !== PREOPEN_FD) return WASI_EBADF;
      const v = view();
      for (let i = 0; i < 64; i += 8) v.setBigUint64(buf + i, 0n, true);
      v.setUint8(buf + 16, f ? 4 : fd === PREOPEN_FD ? 3 : 2);
      v.setBigUint64(buf + 24, 1n, true);
      if (f) v.setBigUint64(buf + 32, BigInt(size(f.path)), true);
      return WASI_ESUCCESS;
    },
    path_open(dirfd, dirflags, path, pathLen, oflags, rightsBase, rightsInh, fdflags, fdOut) {
      if (dirfd !== PREOPEN_FD) return WASI_EBADF;
      const name = str(path, pathLen).replace(/^\/+/, '');
      const exists = Object.prototype.hasOwnProperty.call(files, name);
      if (oflags & 2) return name === '' || name === '.' ? WASI_ENOSYS : WASI_ENOENT; // directories: only the root
      if (!exists && !(oflags & 1)) return WASI_ENOENT;
      if (exists && (oflags & 4)) return WASI_EEXIST;
      if (!exists || (oflags & 8)) files[name] = new Uint8Array(0);
      const fd = nextFd++;
      fds.set(fd, { path: name, pos: 0, append: (fdflags & 1) !== 0 });
      view().setUint32(fdOut, fd, true);
      return WASI_ESUCCESS;
    },
    fd_close(fd) { return fds.delete(fd) ? WASI_ESUCCESS : WASI_EBADF; },
    fd_read(fd, iovs, n, nread) {
      const f = fds.get(fd);
      let total = 0;
      if (f) {
        const data = files[f.path], end = size(f.path), b = bytes();
        for (const [ptr, len] of iovecs(iovs, n)) {
          const k = Math.max(0, Math.min(len, end - f.pos));
          b.set(data.subarray(f.pos, f.pos + k), ptr);
          f.pos += k; total += k;
          if (k < len) break;
        }
      } else if (fd !== 0) return WASI_EBADF;
      view().setUint32(nread, total, true);
      return WASI_ESUCCESS;
    },
    fd_write(fd, iovs, n, nwritten) {
      const f = fds.get(fd);
      if (!f && fd !== 1 && fd !== 2) return WASI_EBADF;
      let total = 0;
      for (const [ptr, len] of iovecs(iovs, n)) {
        const chunk = bytes().slice(ptr, ptr + len);
        if (f) { if (f.append) f.pos = size(f.path); writeAt(f, f.pos, chunk); f.pos += len; }
        else out[fd].push(chunk);
        total += len;
      }
      view().setUint32(nwritten, total, true);
      return WASI_ESUCCESS;
    },
    fd_pwrite(fd, iovs, n, offset, nwritten) {
      const f = fds.get(fd);
      if (!f) return WASI_EBADF;
      let pos = Number(offset), total = 0;
      for (const [ptr, len] of iovecs(iovs, n)) { writeAt(f, pos, bytes().slice(ptr, ptr + len)); pos += len; total += len; }
      view().setUint32(nwritten, total, true);
      return WASI_ESUCCESS;
    },
    fd_seek(fd, offset, whence, newOffset) {
      const f = fds.get(fd);
      if (!f) return fd <= 2 ? 70 /* ESPIPE */ : WASI_EBADF;
      const base = whence === 0 ? 0 : whence === 1 ? f.pos : size(f.path);
      const pos = base + Number(offset);
      if (pos < 0) return WASI_EINVAL;
      f.pos = pos;
      view().setBigUint64(newOffset, BigInt(pos), true);
      return WASI_ESUCCESS;
    },
    fd_allocate() { return WASI_ESUCCESS; },
    path_unlink_file(dirfd, path, len) {
      const name = str(path, len).replace(/^\/+/, '');
      if (!(name in files)) return WASI_ENOENT;
      delete files[name];
      return WASI_ESUCCESS;
    },
    path_create_directory() { return WASI_ENOSYS; },
    path_remove_directory() { return WASI_ENOSYS; },
    proc_exit(code) { throw new WasiExit(code); },
  };

  const instance = new WebAssembly.Instance(module, { wasi_snapshot_preview1: imports });
  memory = instance.exports.memory;
  let rc = 0, trap = null;
  try {
    instance.exports._start();
  } catch (e) {
    if (e instanceof WasiExit) rc = e.code;
    else { rc = 134; trap = e; }
  }
  const text = chunks => {
    const all = new Uint8Array(chunks.reduce((s, c) => s + c.length, 0));
    let at = 0;
    for (const c of chunks) { all.set(c, at); at += c.length; }
    return new TextDecoder().decode(all);
  };
  for (const k of Object.keys(files)) if (files[k].used !== undefined) files[k] = files[k].slice(0, files[k].used);
  return { rc, stdout: text(out[1]), stderr: text(out[2]), files, trap };
}

if (typeof module !== 'undefined') module.exports = { wasiRun };
