#!/usr/bin/env python3
"""Runs the commands a Markdown document shows and checks the output it shows against the program's.

The conventions (docs/walkthrough.md states them for its readers):

  * In a fenced block (```), a line that starts with "$ " is a command; a command line that ends
    with a backslash continues on the next line. The command is run as written, with bash, from
    the root of a fresh copy of the repository (every command of one document in the same copy,
    in order, so that a later command finds the files an earlier one wrote).
  * The other lines of the block, up to the next "$ ", are that command's output, trimmed: each
    must equal a line the command printed (stdout and stderr together), in the same order; lines
    left out need no mark, and "…" stands for any text left out within a line. Runs of spaces
    match any run of spaces (the columns of a line may be shifted); every other character,
    every number included, must be the program's, at the precision it printed.
  * "~" right before a number marks a timing (milliseconds, tokens/s, bytes of a PNG whose
    picture is made of timings): any number matches there. Nothing else is exempt.
  * An HTML comment on the line before a block's opening fence (blank lines between allowed)
    marks the block: <!-- docs-test: long --> runs its commands only with --long (`make
    test-docs-long`; the suite's test_docs names each one it leaves out); <!-- docs-test:
    continued --> is more output of the previous block's last command (the block has no "$ "
    line of its own, takes that command's marks, and its lines are matched in order from the start
    of that output again); <!-- docs-test: continued TEXT --> continues the latest command that
    starts with TEXT instead; <!-- docs-test: as DOC.md --> says that DOC.md (one of the documents
    checked in this call) runs each command of the block, in the same order and from a copy of
    the repository in the same state: each must equal, runs of spaces apart, a command DOC.md ran,
    after the one the block's previous command matched, and its shown lines are matched against
    that command's output (the README's examples that the walkthrough runs: not run twice).
  * A command must exit 0.

The environment is a user's: no OMPI_MCA_rmaps_base_oversubscribe (a command with more ranks than
cores must say --oversubscribe), nor test/run.sh's OMPI_MCA_pml and OMPI_MCA_ess_singleton_isolated
(its OMP_WAIT_POLICY=passive stays: idle threads sleep, the same numbers), no OPENBLAS_CORETYPE
(as test/run.sh); as root,
OMPI_ALLOW_RUN_AS_ROOT=1 and OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1, as the walkthrough tells root users;
`python3` is the Python running this script (the suite's $PYTHON, Debian's, with matplotlib).

Usage (from the repository's root, after `make train_gpt_cpu test/bin/train_gpt_emu_bf16`):
  docs_check.py [--long] --clone DIR [--out DIR] [--fix] FILE.md...
    --clone DIR   makes DIR/NAME for each document that runs a command (NAME: its path, e.g.
                  docs_walkthrough_md), a fresh
                  copy of the repository: the files git lists (tracked, and new ones not ignored),
                  no build outputs but ./train_gpt_cpu and ./train_gpt. ./train_gpt, the GPU
                  trainer, is its build for the CUDA emulator (test/bin/train_gpt_emu_bf16, or
                  $TRAIN_GPT): the docs run only its --plan, arithmetic from the same source, so
                  no CUDA is needed
    --fix         rewrite, in FILE.md, the numbers of each line that no longer matches, from the
                  printed line with the same words and most of the same numbers (when one is
                  best): for updating the docs after a change that moves them (read the diff
                  before committing it; timings stay as they are)
    --out DIR     also keep each command's output in DIR/NAME-NN.txt (NAME: the doc's path, docs_walkthrough_md)
    --replay DIR  run nothing: check (or --fix) against the outputs an earlier --out kept in DIR
A command whose text, and every command before it in its document, equals one already run for an
earlier document (the Chinese walkthrough repeats the English one's) is not run again: its
output is reused. Exit status 0 when every command ran and every shown line matched.
"""
import argparse, os, re, resource, shutil, subprocess, sys, time

ELLIPSIS = '…'
NUM = r'\d[\d,]*(?:\.\d+)?(?:e[+-]?\d+)?'
MARK_RE = re.compile(r'^\s*<!--\s*docs-test:\s*(.*?)\s*-->\s*$')
TOKEN_RE = re.compile(r'(~?)(' + NUM + r')|(\s*' + ELLIPSIS + r'\s*)|(\s+)')


class Command:
    def __init__(self, doc, line, text, marks):
        self.doc, self.line, self.text, self.marks = doc, line, text, marks
        self.same_as = None         # <!-- docs-test: as DOC.md -->: DOC.md runs it
        self.block = 0
        self.expect = []            # (line number, text, block): what the doc shows it prints


def parse(path):
    """The document's commands, in order, each with the output lines it shows."""
    lines = open(path, encoding='utf-8').read().split('\n')
    cmds, i, last_mark, last_cmd, block = [], 0, '', None, 0
    while i < len(lines):
        line = lines[i]
        m = MARK_RE.match(line)
        if m:
            last_mark = m.group(1); i += 1; continue
        if not line.startswith('```'):
            if line.strip(): last_mark = ''
            i += 1; continue
        words = last_mark.split(); last_mark = ''; block += 1
        cont = words[0] == 'continued' if words else False
        marks = {'continued'} if cont else set(words)
        same_as = words[1] if words[:1] == ['as'] and len(words) == 2 else None
        if same_as: marks = {'as'}
        bad = marks - {'long', 'continued', 'as'}
        if bad: sys.exit(f'{path}:{i}: unknown docs-test mark(s): {" ".join(sorted(bad))}')
        i += 1
        cur = None
        if cont:
            prefix = ' '.join(words[1:])
            cur = next((c for c in reversed(cmds) if c.text.startswith(prefix)), None) if prefix else last_cmd
            if cur is None: sys.exit(f'{path}:{i}: a "continued" block with no command before it that starts with "{prefix}"')
        while i < len(lines) and not lines[i].startswith('```'):
            line = lines[i]
            if line.startswith('$ '):
                if 'continued' in marks: sys.exit(f'{path}:{i + 1}: a "continued" block has a command of its own')
                start, text = i + 1, line[2:]
                while text.endswith('\\') and i + 1 < len(lines):
                    i += 1; text += '\n' + lines[i]
                cur = Command(path, start, text, marks)
                cur.same_as, cur.block = same_as, block
                cmds.append(cur)
            elif line.strip() and cur is not None:
                cur.expect.append((i + 1, line, block))
            i += 1
        i += 1
        if cur is not None: last_cmd = cur
    return cmds


def pattern(expected):
    """A regular expression for a shown line, and its numbers: [(is_timing, text)]."""
    out, nums, pos, s = [], [], 0, expected.strip()
    for m in TOKEN_RE.finditer(s):
        out.append(re.escape(s[pos:m.start()])); pos = m.end()
        if m.group(2) is not None:
            nums.append((m.group(1) == '~', m.group(2)))
            body = NUM if m.group(1) else re.escape(m.group(2))
            out.append(r'(?<![\d.])(' + body + r')(?!\d)(?!\.\d)')
        elif m.group(3) is not None: out.append('.*')
        else: out.append(r'\s+')
    out.append(re.escape(s[pos:]))
    return re.compile(r'^\s*' + ''.join(out) + r'\s*$'), nums


def spaced(text):
    """A command with each run of spaces (and continued lines) as one space: two docs may indent it differently."""
    return re.sub(r'\s+', ' ', text.replace('\\\n', ' ')).strip()


def skeleton(line):
    """A line with its numbers and runs of spaces taken out: what two versions of it share."""
    return re.sub(r'\s+', ' ', re.sub('~?' + NUM, '#', line)).strip()


def fresh_copy(dst):
    """dst: the repository's files as a clone has them, and the two trainers."""
    ls = subprocess.run(['git', 'ls-files', '-z', '-co', '--exclude-standard'], stdout=subprocess.PIPE, check=True)
    for f in ls.stdout.decode().split('\0'):
        if f and os.path.isfile(f):
            os.makedirs(os.path.join(dst, os.path.dirname(f)), exist_ok=True)
            shutil.copy2(f, os.path.join(dst, f))
    shutil.copy2('train_gpt_cpu', dst)
    shutil.copy2(os.environ.get('TRAIN_GPT', 'test/bin/train_gpt_emu_bf16'), os.path.join(dst, 'train_gpt'))


def cpu_seconds():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def run(cmd, cwd, env, timeout):
    """(output, exit status, wall seconds, CPU seconds of the command's processes)"""
    t0, c0 = time.time(), cpu_seconds()
    try:
        p = subprocess.run(['bash', '-c', cmd.text], cwd=cwd, env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, timeout=timeout)
        out, rc = p.stdout.decode('utf-8', 'replace'), p.returncode
    except subprocess.TimeoutExpired as e:
        out, rc = (e.stdout or b'').decode('utf-8', 'replace') + f'\n(timed out after {timeout} s)', 124
    return out, rc, time.time() - t0, cpu_seconds() - c0


def check(cmd, printed, fixes):
    """Matches the shown lines against the printed ones, in order; returns (failures, numbers checked)."""
    failures, numbers, at, block = [], 0, 0, None
    for lineno, shown, b in cmd.expect:
        if b != block: at, block = 0, b      # a continued block is matched from the start again
        if shown.strip() == ELLIPSIS: continue
        rx, nums = pattern(shown)
        for j in range(at, len(printed)):
            if rx.match(printed[j]):
                at = j + 1; numbers += sum(1 for t, _ in nums if not t); break
        else:
            sk = skeleton(shown.replace(ELLIPSIS, ' ' + ELLIPSIS + ' '))
            # the printed lines with the same words, those with most of the shown numbers first:
            # for the message, and for --fix when one is best
            gen = pattern(re.sub('(?<![~\\d.])(' + NUM + ')', r'~\1', shown))[0]
            near = [p for p in printed[at:] if gen.match(p)] or [p for p in printed if gen.match(p)]
            score = lambda p: sum(x == y[1] for x, y in zip(gen.match(p).groups(), nums))
            near.sort(key=score, reverse=True)
            msg = f'{cmd.doc}:{lineno}: the doc shows\n    {shown.strip()}\n'
            if near:
                msg += '  the program printed\n' + ''.join(f'    {p.strip()}\n' for p in near[:2])
                if len(near) == 1 or score(near[0]) > score(near[1]): fixes.append((cmd.doc, lineno, shown, near[0]))
            else:
                msg += f'  and the program printed no line like it (words: {sk})\n'
            failures.append(msg)
    return failures, numbers


def fixed(shown, printed):
    """shown with each number that is not a timing replaced by printed's number in its place."""
    rx, nums = pattern(re.sub('(?<![~\\d.])(' + NUM + ')', r'~\1', shown))
    m = rx.match(printed)
    k, res, pos = 0, [], 0
    for t in TOKEN_RE.finditer(shown):
        if t.group(2) is None: continue
        res.append(shown[pos:t.start()]); pos = t.end()
        new = t.group(0) if t.group(1) else m.group(k + 1)
        res.append(new); k += 1
    res.append(shown[pos:])
    return ''.join(res)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--long', action='store_true')
    ap.add_argument('--clone', help='required unless --replay')
    ap.add_argument('--fix', action='store_true')
    ap.add_argument('--out')
    ap.add_argument('--replay')
    ap.add_argument('--timeout', type=int, default=900)
    ap.add_argument('docs', nargs='+')
    a = ap.parse_args()
    if not a.clone and not a.replay: ap.error('--clone DIR or --replay DIR')
    env = dict(os.environ)
    env.pop('OMPI_MCA_rmaps_base_oversubscribe', None)   # a user's shell has no such setting
    env.pop('OMPI_MCA_pml', None); env.pop('OMPI_MCA_ess_singleton_isolated', None)  # nor test/run.sh's MPI start-up ones
    env.pop('OPENBLAS_CORETYPE', None)                   # as test/run.sh: OpenBLAS picks this CPU's kernels
    if os.geteuid() == 0: env.update(OMPI_ALLOW_RUN_AS_ROOT='1', OMPI_ALLOW_RUN_AS_ROOT_CONFIRM='1')
    if a.clone:
        shim = os.path.join(os.path.abspath(a.clone), 'bin')
        os.makedirs(shim, exist_ok=True)
        if not os.path.exists(os.path.join(shim, 'python3')): os.symlink(sys.executable, os.path.join(shim, 'python3'))
        env['PATH'] = shim + os.pathsep + env['PATH']
    cache, failures, fixes, total_numbers, skipped = {}, [], [], 0, []
    outputs, deferred = {}, []  # doc -> [(command, output, exit status)] in the order it ran them; the "as" commands

    def report(cmd, n, name, out, rc, when):
        """Keeps (--out), prints and checks one command's output; returns the numbers it checked."""
        if a.out:
            os.makedirs(a.out, exist_ok=True)
            with open(os.path.join(a.out, f'{name}-{n:02d}.txt'), 'w') as f:
                f.write('$ ' + cmd.text + '\n' + out)
        print(f'{when:>22}  {cmd.doc}:{cmd.line}: $ {cmd.text.splitlines()[0][:90]}', flush=True)
        if rc != 0:
            failures.append(f'{cmd.doc}:{cmd.line}: the command exited {rc}; its last lines:\n' +
                            ''.join(f'    {l}\n' for l in out.rstrip().split('\n')[-8:]))
        f_, k = check(cmd, out.split('\n'), fixes)
        failures.extend(f_)
        return k
    total_wall = total_cpu = 0.0
    replay = {}                 # command -> its output, from the files an earlier --out kept
    for f in sorted(os.listdir(a.replay)) if a.replay else []:
        if f.endswith('.txt'):
            t = open(os.path.join(a.replay, f), encoding='utf-8').read()[2:]
            lines, k = t.split('\n'), 0
            while lines[k].endswith('\\'): k += 1
            replay.setdefault('\n'.join(lines[:k + 1]), '\n'.join(lines[k + 1:]))
    for doc in a.docs:
        cmds = parse(doc)
        name = re.sub(r'\W', '_', doc)
        cwd = os.path.join(a.clone or '.', name)
        history, ran, nlines = (), 0, 0
        for n, cmd in enumerate(cmds, 1):
            history += (cmd.text,)
            if 'long' in cmd.marks and not a.long:
                skipped.append(f'{cmd.doc}:{cmd.line}: $ {cmd.text.splitlines()[0]}')
                continue
            if cmd.same_as:             # checked once its document has run (below)
                deferred.append((n, name, cmd)); ran += 1; nlines += len(cmd.expect)
                continue
            if a.replay:
                if cmd.text not in replay: sys.exit(f'{cmd.doc}:{cmd.line}: no output of this command in {a.replay}')
                out, rc, secs, cpu, again = replay[cmd.text], 0, 0.0, 0.0, False
            elif history in cache:
                out, rc, secs, cpu, again = cache[history] + (True,)
            else:
                if not os.path.exists(cwd): fresh_copy(cwd)     # made when a command first runs there
                out, rc, secs, cpu = run(cmd, cwd, env, a.timeout); again = False
                cache[history] = (out, rc, secs, cpu)
                total_wall += secs; total_cpu += cpu
            outputs.setdefault(doc, []).append((spaced(cmd.text), out, rc))
            when = '(ran above)' if again else f'{secs:5.1f} s, CPU {cpu:5.1f} s'
            total_numbers += report(cmd, n, name, out, rc, when)
            ran += 1; nlines += len(cmd.expect)
        print(f'{doc}: {ran} of {len(cmds)} commands run, {nlines} lines shown, numbers checked so far {total_numbers}')
    at = {}                     # (doc, block) -> where in its DOC.md's commands the block's last one matched
    for n, name, cmd in deferred:
        key, text = (cmd.doc, cmd.block), spaced(cmd.text)
        ran_there = outputs.get(cmd.same_as, [])
        j = next((j for j in range(at.get(key, -1) + 1, len(ran_there)) if ran_there[j][0] == text), None)
        if j is None:
            failures.append(f'{cmd.doc}:{cmd.line}: marked as {cmd.same_as}\'s, but {cmd.same_as} ran no such command '
                            f'(after the block\'s previous one; it must be among the documents checked)\n')
            continue
        at[key] = j
        total_numbers += report(cmd, n, name, ran_there[j][1], ran_there[j][2], f'(ran in {cmd.same_as})')
    for s in skipped: print(f'not run (long; `make test-docs-long` runs it): {s}')
    if a.fix and fixes:
        by_doc = {}
        for doc, lineno, shown, printed in fixes: by_doc.setdefault(doc, []).append((lineno, shown, printed))
        for doc, items in by_doc.items():
            lines = open(doc, encoding='utf-8').read().split('\n')
            for lineno, shown, printed in items:
                assert lines[lineno - 1] == shown
                lines[lineno - 1] = fixed(shown, printed)
            open(doc, 'w', encoding='utf-8').write('\n'.join(lines))
            print(f'--fix: rewrote {len(items)} line(s) of {doc}')
    for f in failures: print('FAIL ' + f, end='')
    print(f'{len(failures)} failure(s); {total_numbers} numbers checked; the commands took {total_wall:.0f} s '
          f'({total_cpu:.0f} s of CPU)')
    return 1 if failures else 0


if __name__ == '__main__':
    sys.exit(main())
