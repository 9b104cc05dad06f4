// A line diff (longest common subsequence) for two definition sources.
// Returns [{op: ' '|'-'|'+', line}]; inputs past 3,000 lines each are compared as wholes.
export function diffLines(a, b) {
  const x = a.split('\n'), y = b.split('\n');
  if (x.length > 3000 || y.length > 3000) return [...x.map((l) => ({ op: '-', line: l })), ...y.map((l) => ({ op: '+', line: l }))];
  const n = x.length, m = y.length;
  const t = Array.from({ length: n + 1 }, () => new Uint16Array(m + 1));
  for (let i = n - 1; i >= 0; i--)
    for (let j = m - 1; j >= 0; j--) t[i][j] = x[i] === y[j] ? t[i + 1][j + 1] + 1 : Math.max(t[i + 1][j], t[i][j + 1]);
  const out = [];
  let i = 0, j = 0;
  while (i < n && j < m) {
    if (x[i] === y[j]) { out.push({ op: ' ', line: x[i] }); i++; j++; }
    else if (t[i + 1][j] >= t[i][j + 1]) out.push({ op: '-', line: x[i++] });
    else out.push({ op: '+', line: y[j++] });
  }
  while (i < n) out.push({ op: '-', line: x[i++] });
  while (j < m) out.push({ op: '+', line: y[j++] });
  return out;
}
