// Decodes a dead letter's stored message (protobuf, proto/strand.proto) into its
// envelope fields, with the JSON payload parsed: operators read it, not base64.
const SIGNAL_TYPES = ['UNSPECIFIED', 'START', 'TASK_COMPLETED', 'TIMER_DUE', 'RETRY_DUE', 'EXTERNAL',
  'CHILD_COMPLETED', 'CALL_RESULT', 'CANCEL', 'TERMINATE', 'CONTINUE', 'REPAIR', 'PAUSE', 'RESUME', 'REWIND'];
const MESSAGES = {
  signal: { 1: ['envelope_version', 'int'], 2: ['signal_id', 'string'], 3: ['instance_id', 'string'], 4: ['type', 'enum', SIGNAL_TYPES],
    5: ['expected_version', 'int'], 6: ['waiting_token', 'string'], 7: ['occurred_at_ms', 'int'], 8: ['due_at_ms', 'int'],
    9: ['payload', 'json'], 10: ['attempt', 'int'], 11: ['name', 'string'] },
  ingress: { 1: ['envelope_version', 'int'], 2: ['type', 'int'], 3: ['target_id', 'string'], 4: ['args', 'json'], 5: ['token', 'string'] },
};

export function base64Bytes(b64) {
  const bin = atob(b64 || '');
  const out = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
  return out;
}

function varint(buf, pos) {
  let v = 0n, shift = 0n;
  for (;;) {
    if (pos >= buf.length) throw new Error('truncated varint');
    const b = buf[pos++];
    v |= BigInt(b & 0x7f) << shift;
    if (!(b & 0x80)) return [v, pos];
    shift += 7n;
    if (shift > 70n) throw new Error('varint too long');
  }
}

// {kind, fields: {name: value}} or {error} when the bytes are no such message.
export function decodeMessage(bytes, topic) {
  const kind = /ingress$/.test(topic || '') ? 'ingress' : 'signal';
  const spec = MESSAGES[kind];
  const fields = {};
  try {
    let pos = 0;
    while (pos < bytes.length) {
      let key;
      [key, pos] = varint(bytes, pos);
      const no = Number(key >> 3n), wire = Number(key & 7n);
      const [name, type, names] = spec[no] || ['field_' + no, 'raw'];
      if (wire === 0) {
        let v;
        [v, pos] = varint(bytes, pos);
        const n = BigInt.asIntN(64, v);
        fields[name] = type === 'enum' ? (names[Number(n)] || Number(n)) : Number(n);
      } else if (wire === 2) {
        let len;
        [len, pos] = varint(bytes, pos);
        const end = pos + Number(len);
        if (end > bytes.length) throw new Error('truncated field ' + name);
        const text = new TextDecoder('utf-8', { fatal: false }).decode(bytes.subarray(pos, end));
        pos = end;
        if (type === 'json') {
          try { fields[name] = JSON.parse(text); } catch { fields[name] = text; fields[name + '_not_json'] = true; }
        } else fields[name] = text;
      } else if (wire === 1) { pos += 8; } else if (wire === 5) { pos += 4; } else throw new Error('unknown wire type ' + wire);
    }
  } catch (e) {
    return { kind, fields, error: e.message };
  }
  return { kind, fields };
}
