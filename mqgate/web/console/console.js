// The console's frame: the login form, the navigation (#overview, #destinations ...),
// and starting the page in view and stopping the one left.
"use strict";

const PAGES = {overview: OverviewPage, destinations: DestinationsPage,
               connections: ConnectionsPage, durables: DurablesPage, capture: CapturePage};
let current = null;

function showLogin(message) {
  if (current) PAGES[current].stop();
  current = null;
  document.querySelectorAll(".page").forEach((p) => { p.hidden = true; });
  document.getElementById("nav").hidden = true;
  document.getElementById("logout").hidden = true;
  document.getElementById("who").textContent = "";
  document.getElementById("login").hidden = false;
  document.getElementById("login-error").textContent = message || "";
}

function route() {
  if (!Api.loggedIn()) { showLogin(); return; }
  const name = (location.hash || "#overview").slice(1);
  const page = PAGES[name] ? name : "overview";
  document.getElementById("login").hidden = true;
  document.getElementById("nav").hidden = false;
  document.getElementById("logout").hidden = false;
  document.getElementById("who").textContent = `logged in as ${Api.user()}`;
  if (current === page) return;
  if (current) PAGES[current].stop();
  current = page;
  document.querySelectorAll(".page").forEach((p) => { p.hidden = p.id !== `page-${page}`; });
  document.querySelectorAll("#nav a").forEach((a) => {
    a.classList.toggle("current", a.dataset.page === page);
  });
  PAGES[page].start();
}

document.getElementById("login-form").addEventListener("submit", async (event) => {
  event.preventDefault();
  const form = event.target;
  const error = document.getElementById("login-error");
  error.textContent = "";
  try {
    await Api.login(form.user.value, form.password.value);
    form.password.value = "";
    route();
  } catch (e) {
    error.textContent = e.status === 401
      ? "Wrong user or password."
      : e.status === 403 ? `This user may not use the console: ${e.message}`
      : `Cannot log in: ${e.message}`;
  }
});

document.getElementById("logout").addEventListener("click", () => {
  Api.logout();
  showLogin("Logged out.");
});

Api.onLoggedOut = showLogin;
DestinationsPage.setup();
CapturePage.setup();
window.addEventListener("hashchange", route);
route();
