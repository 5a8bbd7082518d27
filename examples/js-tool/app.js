// `rates`: an example Reson tool in JavaScript. `convert` asks the rates
// service the user configured (`config.rates_url`, reached through the host's
// `http` import, so only if the user granted its host) for the rates of one
// currency and converts an amount. The service answers
// `GET <rates_url>?base=USD` with `{"base": "USD", "rates": {"EUR": 0.92, ...}}`.
import { get } from 'reson:plugin/config@0.1.0';
import { send } from 'reson:plugin/http@0.1.0';
import { log } from 'reson:plugin/log@0.1.0';

const CODE = '^[A-Z]{3}$';

const fail = (tag, val) => {
  throw { tag, val };
};

// The rates for `base`, or a tool error saying what went wrong.
function rates(base) {
  const service = get('rates_url') ?? fail('failed', 'no `rates_url` in this plugin\'s config');
  let response;
  try {
    response = send({
      method: 'GET',
      url: `${service}?base=${base}`,
      headers: [['accept', 'application/json']],
      body: undefined,
      timeoutMs: 3000,
    });
  } catch (error) {
    // The host's refusal stays a refusal; the model can tell the user which
    // grant is missing.
    const reason = error.payload ?? error;
    const tag = reason.tag === 'denied' ? 'denied' : 'failed';
    fail(tag, `rates service: ${reason.tag ?? reason}${reason.val ? `: ${reason.val}` : ''}`);
  }
  if (response.status !== 200) fail('failed', `rates service answered ${response.status}`);
  const answer = JSON.parse(new TextDecoder().decode(response.body));
  return answer.rates ?? fail('failed', 'rates service answered without `rates`');
}

const tools = {
  convert: {
    description: 'Converts an amount of money from one currency to another at today\'s rate.',
    schema: {
      type: 'object',
      properties: {
        amount: { type: 'number', description: 'How much, in `from`.' },
        from: { type: 'string', pattern: CODE, description: 'ISO 4217 code, e.g. USD.' },
        to: { type: 'string', pattern: CODE, description: 'ISO 4217 code, e.g. EUR.' },
      },
      required: ['amount', 'from', 'to'],
      additionalProperties: false,
    },
    run({ amount, from, to }) {
      const rate = rates(from)[to];
      if (typeof rate !== 'number') fail('invalid-arguments', `no rate from ${from} to ${to}`);
      log('info', `${from}->${to} at ${rate}`);
      return `${amount} ${from} = ${(amount * rate).toFixed(2)} ${to} (rate ${rate})`;
    },
  },
};

export const tool = {
  list() {
    return Object.entries(tools).map(([name, { description, schema }]) => ({
      name,
      description,
      inputSchema: JSON.stringify(schema),
    }));
  },

  call(name, args) {
    const found = tools[name] ?? fail('unknown-tool', name);
    try {
      return { text: found.run(JSON.parse(args)), images: [], includeOutputOnlyOnce: false };
    } catch (error) {
      if (error?.tag) throw error;
      throw { tag: 'failed', val: String(error) };
    }
  },
};
