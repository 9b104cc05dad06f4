// The web console's browser scenarios (issue 19): Debian's chromium, headless, driven by
// puppeteer-core against real services. Started by tests/integration/test_console.c,
// which sets up the services and data and passes them in STRAND_UI_* variables.
// Each scenario passes or fails (a route the tree does not serve yet is a failure, not
// a skip); every page gets an axe-core check and a screenshot in STRAND_UI_SCREENSHOTS.
// Prints "N passed, N failed" and exits 1 if any failed. Bounded: 400 s in all.
import puppeteer from 'puppeteer-core';
import { readFileSync, mkdirSync, existsSync } from 'node:fs';
import { createRequire } from 'node:module';

const env = (k) => {
  if (!process.env[k]) { console.error(`console.test: ${k} is not set (run it through ctest: test_console)`); process.exit(2); }
  return process.env[k];
};
const BASE = env('STRAND_UI_URL');
const T = { admin: env('STRAND_UI_ADMIN_TOKEN'), approver: env('STRAND_UI_APPROVER_TOKEN'), nobody: env('STRAND_UI_NOBODY_TOKEN'), viewer: env('STRAND_UI_VIEWER_TOKEN') };
const TASK_FLOW = env('STRAND_UI_TASK_FLOW');
const BULK_FLOW = env('STRAND_UI_BULK_FLOW');
const BULK_N = Number(env('STRAND_UI_BULK_COUNT'));
const DEAD_LETTER = env('STRAND_UI_DEAD_LETTER');
const DL_INSTANCE = env('STRAND_UI_DL_INSTANCE');
const TASK_INSTANCE = env('STRAND_UI_TASK_INSTANCE');
const SHOTS = process.env.STRAND_UI_SCREENSHOTS || '/tmp/console-screenshots';
const CHROMIUM = process.env.STRAND_CHROMIUM || ['/usr/bin/chromium', '/usr/bin/chromium-browser'].find(existsSync);
mkdirSync(SHOTS, { recursive: true });
const axeSource = readFileSync(createRequire(import.meta.url).resolve('axe-core/axe.min.js'), 'utf8');

setTimeout(() => { console.error('console.test: over 400 s, giving up'); process.exit(1); }, 400000).unref();

const results = [];
async function scenario(name, fn, limitMs = 120000) {
  const started = Date.now();
  let timer;
  try {
    await Promise.race([fn(), new Promise((_, rej) => { timer = setTimeout(() => rej(new Error(`over ${limitMs / 1000} s`)), limitMs); })]);
    results.push([name, true]);
    console.log(`PASS  ${name} (${((Date.now() - started) / 1000).toFixed(1)} s)`);
  } catch (e) {
    results.push([name, false, e.message]);
    console.log(`FAIL  ${name}: ${e.message}`);
    await shot('failed-' + name.replace(/[^a-z0-9]+/gi, '-').toLowerCase()).catch(() => {});
  } finally {
    clearTimeout(timer);
  }
}
const check = (cond, msg) => { if (!cond) throw new Error(msg); };

if (!CHROMIUM) { console.log('FAIL  chromium: not installed (scripts/deps.sh installs Debian\'s chromium)'); console.log('0 passed, 1 failed'); process.exit(1); }
const browser = await puppeteer.launch({
  executablePath: CHROMIUM,
  headless: true,
  args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage', '--no-first-run', '--disable-extensions'],
  defaultViewport: { width: 1366, height: 900 },
  protocolTimeout: 60000,
});
const page = await browser.newPage();
page.setDefaultTimeout(20000);
const external = [];
page.on('request', (r) => { const u = r.url(); if (!u.startsWith(BASE) && !u.startsWith('data:') && !u.startsWith('blob:')) external.push(u); });
page.on('pageerror', (e) => console.log('page error:', e.message));

async function shot(name, fullPage = true) {
  await page.screenshot({ path: `${SHOTS}/${name}.png`, fullPage });
}
// axe-core on the page as it is: WCAG 2 A and AA rules; violations fail the scenario.
async function axe(name) {
  await page.evaluate(axeSource);
  const v = await page.evaluate(async () => {
    const r = await window.axe.run(document, { runOnly: ['wcag2a', 'wcag2aa', 'best-practice'] });
    return r.violations.map((x) => `${x.id} (${x.impact}): ${x.nodes.slice(0, 3).map((n) => n.target.join(' ')).join(', ')}`);
  });
  check(v.length === 0, `axe on ${name}: ${v.join('; ')}`);
  console.log(`      axe: ${name}: no violations`);
}
async function go(path) {
  await page.goto(BASE + path, { waitUntil: 'networkidle0' });
}
async function setValue(sel, value) {
  await page.$eval(sel, (el, v) => { el.value = v; el.dispatchEvent(new Event('input', { bubbles: true })); }, value);
}
async function signIn(who) {
  await go('/ui/');
  await page.evaluate(() => sessionStorage.clear());
  await go('/ui/');
  await page.waitForSelector('#token');
  await page.type('#token', T[who]);
  await Promise.all([page.waitForSelector('#principal'), page.click('button[type=submit]')]);
}
async function apiCall(who, method, path, body) {
  return page.evaluate(async (t, m, p, b) => {
    const r = await fetch(p, { method: m, headers: { Authorization: 'Bearer ' + t, 'Content-Type': 'application/json' }, body: b ? JSON.stringify(b) : undefined });
    const text = await r.text();
    let data = null;
    try { data = JSON.parse(text); } catch { data = text; }
    return { status: r.status, data };
  }, T[who], method, path, body);
}
async function confirmDialog() {
  await page.waitForSelector('dialog[open] button[type=submit]');
  await page.click('dialog[open] button[type=submit]');
}
// Waits for the text of `sel` to satisfy `pred`, or for an error box; fails with the error.
async function waitText(sel, pred, timeout = 20000) {
  const until = Date.now() + timeout;
  for (;;) {
    const text = await page.$eval(sel, (el) => el.textContent).catch(() => null);
    if (text !== null && pred(text)) return text;
    const err = await page.$eval('.error', (el) => el.textContent).catch(() => null);
    if (err) throw new Error('the page shows an error: ' + err);
    if (Date.now() > until) throw new Error(`${sel}: "${text}" after ${timeout / 1000} s`);
    await new Promise((r) => setTimeout(r, 250));
  }
}
async function waitInstance(id, status, timeoutS = 30) {
  for (let i = 0; i < timeoutS * 4; i++) {
    const r = await apiCall('admin', 'GET', '/v1/instances/' + id);
    if (r.status === 200 && r.data.status === status) return r.data;
    await new Promise((res) => setTimeout(res, 250));
  }
  throw new Error(`instance ${id} is not ${status} after ${timeoutS} s`);
}

let instanceId = null;

await scenario('sign in', async () => {
  const res = await page.goto(BASE + '/ui/', { waitUntil: 'networkidle0' });
  const csp = res.headers()['content-security-policy'] || '';
  check(csp.includes("default-src 'none'") && csp.includes("script-src 'self'"), 'no strict Content-Security-Policy: ' + csp);
  check(res.headers()['content-encoding'] === 'gzip', 'the page was not sent gzipped to a browser that takes gzip');
  await page.waitForSelector('#token');
  await axe('sign-in');
  await shot('sign-in');
  await signIn('admin');
  const who = await page.$eval('#principal', (el) => el.textContent);
  check(who === 'root', 'signed in as ' + who);
  await page.waitForSelector('.cards');
  await axe('overview');
  await shot('overview');
  await page.click('a[href="/ui/instances?stuck=1"]');
  await page.waitForFunction(() => document.querySelector('h1') && document.querySelector('h1').textContent === 'Stuck instances');
  await page.waitForFunction(() => document.querySelector('table.list tbody tr') || document.querySelector('.error') || /No instance is stuck/.test(document.body.textContent));
  await axe('stuck instances');
  await shot('stuck');
});

await scenario('keyboard: the skip link, then the main menu, without a mouse', async () => {
  await go('/ui/');
  await page.waitForSelector('#principal');
  await page.keyboard.press('Tab');
  const first = await page.evaluate(() => document.activeElement.textContent);
  check(first === 'Skip to content', 'the first Tab stop is ' + first);
  await page.keyboard.press('Tab');
  await page.keyboard.press('Tab');
  const third = await page.evaluate(() => document.activeElement.textContent);
  check(third === 'Instances', 'the third Tab stop is ' + third);
  await page.keyboard.press('Enter');
  await page.waitForFunction(() => location.pathname === '/ui/instances');
  await page.waitForSelector('#f-definition');
});

await scenario('start an instance from a definition', async () => {
  await go('/ui/definitions');
  // the list is long on a shared database: find the definition by its name, as a user would
  await page.type('#f-name', TASK_FLOW);
  await page.click('form[aria-label="Filter definitions"] button[type="submit"]');
  await page.waitForSelector(`a[href="/ui/definitions/${TASK_FLOW}/1"]`);
  await axe('definitions');
  await shot('definitions');
  await page.click(`a[href="/ui/definitions/${TASK_FLOW}/2"]`);
  await page.waitForSelector('.diagram svg');
  await page.select('#diff-with', '1');
  await page.waitForSelector('pre.diff .add');
  await axe('definition');
  await shot('definition');
  await page.click('details.start summary');
  await page.type('#start-ref', 'ui-order-1');
  await Promise.all([page.waitForFunction(() => /^\/ui\/instances\/[0-9a-f-]{36}$/.test(location.pathname)), page.click('#start-submit')]);
  instanceId = await page.evaluate(() => location.pathname.split('/').pop());
  console.log('      started ' + instanceId);
});

await scenario('find it in the list', async () => {
  check(instanceId, 'no instance was started');
  await go('/ui/instances');
  await page.waitForSelector('#f-definition');
  await page.type('#f-definition', TASK_FLOW);
  await page.type('#f-business_ref', 'ui-order-1');
  await page.click('.filters button[type=submit]');
  await page.waitForSelector(`a[href="/ui/instances/${instanceId}"]`);
  check(page.url().includes('business_ref=ui-order-1'), 'the filter is not in the URL: ' + page.url());
  await page.waitForSelector('.counts');
  await axe('instances');
  await shot('instances');
});

await scenario('open it and see the waiting step highlighted in the diagram', async () => {
  check(instanceId, 'no instance was started');
  await page.click(`a[href="/ui/instances/${instanceId}"]`);
  await page.waitForSelector('#diagram svg');
  const waiting = await page.$$eval('#diagram svg .waiting', (els) => els.map((e) => e.id || e.getAttribute('class')));
  check(waiting.length > 0, 'no node of the diagram is marked waiting');
  check(waiting.some((w) => w.includes('approve')), 'the waiting node is not the approve step: ' + waiting.join(','));
  const kind = await page.$eval('#waiting-kind', (el) => el.textContent);
  check(kind === 'task', 'the runtime panel says it waits for ' + kind);
  await page.waitForSelector('button[data-verb="cancel"]');
  await axe('instance');
  await shot('instance');
});

await scenario('complete its task from the inbox: one invalid, one valid submission', async () => {
  check(instanceId, 'no instance was started');
  await signIn('approver');
  const tasks = await apiCall('approver', 'GET', `/v1/tasks?instance_id=${instanceId}&status=open`);
  check(tasks.status === 200 && tasks.data.items.length === 1, 'the task list: ' + JSON.stringify(tasks));
  const taskId = tasks.data.items[0].id;
  await go('/ui/inbox');
  await page.waitForSelector(`a[href="/ui/inbox/${taskId}"]`);
  await page.click(`a[href="/ui/inbox/${taskId}"]`);
  await page.waitForSelector('#r-comment');
  await page.click('#r-approved');
  await page.type('#r-comment', 'ok');   // minLength 3: the server refuses it
  await page.click('#complete');
  await page.waitForSelector('#r-comment-err');
  const err = await page.$eval('#r-comment-err', (el) => el.textContent);
  console.log('      the server refused the first result at the field: ' + err);
  const invalid = await page.$eval('#r-comment', (el) => el.getAttribute('aria-invalid'));
  check(invalid === 'true', 'the comment field is not marked invalid');
  await axe('inbox (with a field error)');
  await shot('inbox');
  await setValue('#r-comment', 'Looks good to me');
  await page.click('#complete');
  await waitText('#task-status', (t) => t.startsWith('completed'));
  const done = await waitInstance(instanceId, 'completed');
  check(done.output && done.output.ok === true, 'output: ' + JSON.stringify(done.output));
});

await scenario('replay an edited dead letter', async () => {
  await signIn('admin');
  await go('/ui/dead-letters');
  await page.waitForSelector(`a[href="/ui/dead-letters/${DEAD_LETTER}"]`);
  await axe('dead letters');
  await shot('dead-letters');
  await page.click(`a[href="/ui/dead-letters/${DEAD_LETTER}"]`);
  await page.waitForSelector('#dl-edit-button');
  const decoded = await page.$eval('main', (el) => el.textContent);
  check(decoded.includes('EXTERNAL') && decoded.includes(DL_INSTANCE), 'the envelope is not decoded');
  await page.click('#dl-edit-button');
  await setValue('#dl-edit', '{"go": true}');
  await axe('dead letter (editing)');
  await shot('dead-letter');
  await page.click('#dl-replay');
  await confirmDialog();
  await waitText('#dl-status', (t) => t === 'replayed');
  const inst = await waitInstance(DL_INSTANCE, 'completed');
  check(inst.output && inst.output.go === true, 'the edited payload did not reach the instance: ' + JSON.stringify(inst.output));
});

await scenario(`bulk-cancel ${BULK_N} instances and watch the progress reach ${BULK_N}`, async () => {
  await go(`/ui/instances?definition=${BULK_FLOW}&status=waiting`);
  await page.waitForSelector('.counts');
  await page.waitForFunction((n) => document.querySelectorAll('table.list tbody tr').length === n, {}, BULK_N);
  await page.click('input[aria-label="Select all on this page"]');
  await page.waitForSelector('#select-all-matching');
  await page.click('#select-all-matching');
  await page.select('#bulk-action', 'cancel');
  await page.click('#bulk-run');
  await page.waitForSelector('dialog[open]');
  await axe('bulk confirmation');
  await shot('instances-bulk-confirm', false);
  await confirmDialog();
  const seen = new Set();
  const until = Date.now() + 120000;
  for (;;) {
    const done = await page.$eval('#bulk-done', (el) => el.textContent).catch(() => null);
    if (done !== null) seen.add(done);
    if (done === String(BULK_N)) break;
    const err = await page.$eval('.error', (el) => el.textContent).catch(() => null);
    if (err) throw new Error('the page shows an error: ' + err);
    if (Date.now() > until) throw new Error(`progress ${done} after 120 s`);
    await new Promise((r) => setTimeout(r, 200));
  }
  console.log('      progress seen: ' + [...seen].join(' → '));
  const max = await page.$eval('#bulk-progress', (el) => el.max);
  check(max === BULK_N, 'the progress bar max is ' + max);
  await shot('instances-bulk');
  const counts = await apiCall('admin', 'GET', `/v1/instance-counts?definition=${BULK_FLOW}`);
  for (let i = 0; i < 120 && (counts.data.counts || {}).cancelled !== BULK_N; i++) {
    await new Promise((r) => setTimeout(r, 500));
    Object.assign(counts, await apiCall('admin', 'GET', `/v1/instance-counts?definition=${BULK_FLOW}`));
  }
  check((counts.data.counts || {}).cancelled === BULK_N, 'cancelled: ' + JSON.stringify(counts.data));
}, 180000);

await scenario('a principal without a role (and a viewer) sees no admin action and gets 403 when it forces one', async () => {
  await signIn('nobody');
  await go(`/ui/instances/${TASK_INSTANCE}`);
  await page.waitForSelector('h1');
  await page.waitForFunction(() => !document.querySelector('[aria-busy="true"]'));
  check((await page.$$('button[data-verb]')).length === 0, 'verbs are shown to nobody');
  await axe('instance, no role');
  await shot('no-role');
  await go('/ui/instances');
  await page.waitForSelector('table.list');
  check((await page.$('#bulk-run')) === null, 'the bulk action is shown to nobody');
  await go(`/ui/dead-letters/${DEAD_LETTER}`);
  await page.waitForSelector('h1');
  check((await page.$('#dl-replay')) === null, 'replay is shown to nobody');
  for (const [m, p, b] of [['POST', `/v1/instances/${TASK_INSTANCE}/cancel`, {}], ['POST', `/v1/instances/${TASK_INSTANCE}/terminate`, {}],
    ['POST', `/v1/dead-letters/${DEAD_LETTER}/discard`, {}]]) {
    const r = await apiCall('nobody', m, p, b);
    check(r.status === 403, `${m} ${p} answered ${r.status} to nobody`);
  }
  // a viewer reads everything and may change nothing: it sees the pages, not the actions
  await signIn('viewer');
  await go(`/ui/instances/${TASK_INSTANCE}`);
  await page.waitForSelector('#diagram svg');
  check((await page.$$('button[data-verb]')).length === 0, 'verbs are shown to a viewer');
  await shot('viewer');
  await go('/ui/instances');
  await page.waitForSelector('table.list tbody tr');
  check((await page.$('#bulk-run')) === null, 'the bulk action is shown to a viewer');
  await go(`/ui/definitions/${TASK_FLOW}/1`);
  await page.waitForSelector('.diagram svg');
  check((await page.$('#start-submit')) === null, 'starting is offered to a viewer');
  const forced = await apiCall('viewer', 'POST', `/v1/instances/${TASK_INSTANCE}/cancel`, {});
  check(forced.status === 403, `a forced cancel answered ${forced.status} to a viewer`);
  const still = await apiCall('admin', 'GET', `/v1/instances/${TASK_INSTANCE}`);
  check(still.data.status === 'waiting', 'the forced cancel changed the instance: ' + still.data.status);
});

await scenario('no request left the origin', async () => {
  check(external.length === 0, 'requests to elsewhere: ' + external.slice(0, 5).join(', '));
});

await browser.close();
const passed = results.filter((r) => r[1]).length;
const failed = results.length - passed;
console.log(`screenshots: ${SHOTS}`);
for (const [name, ok, why] of results) if (!ok) console.log(`failed: ${name}: ${why}`);
console.log(`${passed} passed, ${failed} failed`);
process.exit(failed === 0 ? 0 : 1);
