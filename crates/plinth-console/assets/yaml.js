// YAML for showing and editing objects. Only the emitter lives here: what the user edits goes
// back as `application/apply-patch+yaml`, which the server parses.

const PLAIN = /^[A-Za-z_./][A-Za-z0-9_ ./:@-]*$/;
const RESERVED = /^(true|false|null|yes|no|on|off|y|n|~)$/i;

// A string as a YAML scalar: plain when that reads back as the same string, else quoted
// (JSON's double-quoted strings are YAML's too).
function scalar(value) {
  if (value === null || value === undefined) return 'null';
  if (typeof value === 'number' || typeof value === 'boolean') return String(value);
  const text = String(value);
  if (text !== '' && PLAIN.test(text) && !RESERVED.test(text) && !/[: ]$/.test(text)
      && !text.includes(': ') && !text.includes(' #') && isNaN(Number(text))) {
    return text;
  }
  return JSON.stringify(text);
}

function isEmpty(value) {
  return (Array.isArray(value) && value.length === 0)
    || (value !== null && typeof value === 'object' && !Array.isArray(value) && Object.keys(value).length === 0);
}

function lines(value, indent, out) {
  const pad = ' '.repeat(indent);
  if (Array.isArray(value)) {
    for (const item of value) {
      if (item !== null && typeof item === 'object' && !isEmpty(item)) {
        const nested = [];
        lines(item, indent + 2, nested);
        // The first line of the item shares the dash.
        nested[0] = pad + '- ' + nested[0].slice(indent + 2);
        out.push(...nested);
      } else {
        out.push(pad + '- ' + (isEmpty(item) ? (Array.isArray(item) ? '[]' : '{}') : scalar(item)));
      }
    }
    return;
  }
  for (const [key, item] of Object.entries(value)) {
    const name = scalar(key);
    if (item !== null && typeof item === 'object' && !isEmpty(item)) {
      out.push(pad + name + ':');
      // Lists sit at their key's indentation, as kubectl prints them.
      lines(item, Array.isArray(item) ? indent : indent + 2, out);
    } else {
      out.push(pad + name + ': ' + (isEmpty(item) ? (Array.isArray(item) ? '[]' : '{}') : scalar(item)));
    }
  }
}

/** A JSON value (an object) as YAML text. */
export function toYaml(value) {
  if (value === null || typeof value !== 'object') return scalar(value) + '\n';
  const out = [];
  lines(value, 0, out);
  return out.join('\n') + '\n';
}
