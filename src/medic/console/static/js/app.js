// The console shell: session, navigation (hash routes), and the page modules.

import "./htmx-medic.js";
import { ApiError, del, get, onUnauthorized, principal, setSession } from "./api.js";
import { audit } from "./pages/audit.js";
import { jobs, timeline } from "./pages/jobs.js";
import { nodes } from "./pages/nodes.js";
import { overview } from "./pages/overview.js";
import { policy } from "./pages/policy.js";
import { repairs } from "./pages/repairs.js";
import { signIn } from "./pages/signin.js";
import { say } from "./util.js";

const PAGES = {
  overview: { title: "Overview", show: overview },
  jobs: { title: "Jobs", show: jobs },
  job: { title: "Job timeline", show: timeline, nav: "jobs" },
  nodes: { title: "Nodes", show: nodes },
  repairs: { title: "Repairs", show: repairs },
  audit: { title: "Audit", show: audit },
  policy: { title: "Policy", show: policy },
};

const main = document.getElementById("main");
let signedIn = false;

// "#/jobs/42?cluster=c1" -> { page: "job", id: "42", params: {cluster: "c1"} }
function parseRoute() {
  const raw = location.hash.replace(/^#\/?/, "");
  const [path, query = ""] = raw.split("?");
  const parts = path.split("/").filter(Boolean).map(decodeURIComponent);
  const params = Object.fromEntries(new URLSearchParams(query));
  if (parts[0] === "jobs" && parts[1]) return { page: "job", id: parts[1], params };
  return { page: PAGES[parts[0]] ? parts[0] : "overview", id: null, params };
}

function showChrome(visible) {
  document.getElementById("nav").hidden = !visible;
  document.getElementById("who").hidden = !visible;
  const who = principal();
  document.getElementById("who-name").textContent = who ? `${who.name} (${who.role})` : "";
}

function markCurrent(page) {
  for (const link of document.querySelectorAll("#nav a")) {
    if (link.dataset.page === page) link.setAttribute("aria-current", "page");
    else link.removeAttribute("aria-current");
  }
}

function route(moved = false) {
  if (!signedIn) return;
  const { page, id, params } = parseRoute();
  const spec = PAGES[page];
  document.title = `${spec.title} · medic console`;
  markCurrent(spec.nav || page);
  main.innerHTML = "";
  spec.show(main, { id, params });
  window.htmx.process(main);
  const heading = main.querySelector("h1");
  if (heading && moved) heading.focus({ preventScroll: true });
}

// Whether this browser signed in (the cookie itself is HttpOnly): without it the console shows
// the sign-in page at once instead of asking the API, which would audit an access-denied.
const SIGNED_IN = "medic.console.signed-in";

function enter(session) {
  setSession(session);
  signedIn = true;
  localStorage.setItem(SIGNED_IN, "1");
  document.body.dataset.role = session.role;
  showChrome(true);
  route();
}

function leave(message) {
  setSession(null);
  signedIn = false;
  localStorage.removeItem(SIGNED_IN);
  delete document.body.dataset.role;
  showChrome(false);
  document.title = "Sign in · medic console";
  signIn(main, { message, onSignedIn: enter });
}

onUnauthorized(() => {
  if (signedIn) leave("Your session has ended: sign in again.");
});

document.getElementById("sign-out").addEventListener("click", async () => {
  try {
    await del("session", { quiet401: true });
  } catch (error) {
    if (!(error instanceof ApiError)) say(`Sign-out failed: ${error.message}`, "error");
  }
  leave("Signed out.");
});

window.addEventListener("hashchange", () => route(true));

async function start() {
  if (localStorage.getItem(SIGNED_IN) !== "1") {
    leave();
    return;
  }
  try {
    enter(await get("session", undefined, { quiet401: true }));
  } catch (error) {
    if (error instanceof ApiError && error.status === 401) leave();
    else leave(`The medic API did not answer: ${error.message}`);
  }
}

start();
