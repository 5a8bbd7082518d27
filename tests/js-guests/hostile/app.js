// `hostile` in JavaScript: tools that each misbehave in one way, so the
// authoring tests can check that the host contains a StarlingMonkey guest as
// it contains a Rust one (deadline, memory cap, grants), and that the plugin
// still answers afterwards (`echo`).
import { get } from 'reson:plugin/config@0.1.0';
import { run } from 'reson:plugin/process@0.1.0';
import { getDirectories } from 'wasi:filesystem/preopens@0.2.12';

const object = (properties) => JSON.stringify({ type: 'object', properties });

const tools = {
  echo: {
    description: 'Returns its text.',
    schema: object({ text: { type: 'string' } }),
    run: ({ text }) => text,
  },
  // Never returns: only the host's deadline stops it.
  spin: {
    description: 'Loops forever.',
    schema: object({}),
    run: () => {
      for (;;) {}
    },
  },
  // Loops over host calls, so the deadline must also hold between them.
  host_spin: {
    description: 'Calls the host forever.',
    schema: object({}),
    run: () => {
      for (;;) get('anything');
    },
  },
  // Keeps every megabyte it allocates, so the heap grows until the cap.
  grow: {
    description: 'Allocates without end.',
    schema: object({}),
    run: () => {
      const hoard = [];
      for (;;) hoard.push(new Uint8Array(1 << 20).fill(1));
    },
  },
  // Recurses until the engine (or the wasm stack) gives out.
  recurse: {
    description: 'Recurses `depth` times.',
    schema: object({ depth: { type: 'integer' } }),
    run: ({ depth }) => {
      const down = (n) => (n === 0 ? 0 : 1 + down(n - 1));
      return `depth: ${down(depth)}`;
    },
  },
  // Runs a host command through the `process` import, granted or not.
  run: {
    description: 'Runs `program` with `args` and returns its stdout.',
    schema: object({ program: { type: 'string' }, args: { type: 'array', items: { type: 'string' } } }),
    run: ({ program, args }) => {
      try {
        const out = run({ program, args, cwd: undefined, env: [], stdin: undefined, timeoutMs: undefined });
        return new TextDecoder().decode(out.stdout);
      } catch (e) {
        const reason = e.payload ?? e;
        throw { tag: 'denied', val: `${reason.tag}: ${reason.val ?? ''}` };
      }
    },
  },
  // Returns as many bytes as asked for, past the output cap.
  flood: {
    description: 'Returns `bytes` bytes.',
    schema: object({ bytes: { type: 'integer' } }),
    run: ({ bytes }) => 'x'.repeat(bytes),
  },
  // Reads a file through WASI, offering the path to every granted directory
  // as given (or, for an absolute path under a grant, relative to it): only
  // the host decides what is reachable.
  read: {
    description: 'Reads a file.',
    schema: object({ path: { type: 'string' } }),
    run: ({ path }, context) => {
      const reasons = [];
      for (const [dir, mount] of getDirectories()) {
        let relative = path;
        if (path.startsWith(mount + '/')) relative = path.slice(mount.length + 1);
        else if (!path.startsWith('/') && context.cwd !== mount) continue;
        try {
          const file = dir.openAt({ symlinkFollow: true }, relative, {}, { read: true });
          const [bytes] = file.read(1n << 20n, 0n);
          return new TextDecoder().decode(bytes);
        } catch (e) {
          reasons.push(`${mount}: ${e.payload ?? e}`);
        }
      }
      throw { tag: 'denied', val: `cannot read ${path}: ${reasons.join('; ') || 'no grant'}` };
    },
  },
  // Throws an ordinary exception, not a tool error.
  throw: {
    description: 'Throws a TypeError.',
    schema: object({}),
    run: () => null.property,
  },
};

export const tool = {
  list() {
    return Object.entries(tools).map(([name, t]) => ({
      name,
      description: t.description,
      inputSchema: t.schema,
    }));
  },
  call(name, args, context) {
    const t = tools[name];
    if (!t) throw { tag: 'unknown-tool', val: name };
    return { text: t.run(JSON.parse(args), context), images: [], includeOutputOnlyOnce: false };
  },
};
