// The sign-in form: email and password in, a session (api.js `auth`) out, refusals shown in the form;
// and, where the gateway has an organisation's OpenID provider, the link that signs in there instead
// (the server runs that flow and lands back on the page signed in, or with ?sign_in=failed).
//
// The password field is emptied once it has been sent, whatever the answer; the email stays for a retry.

import { auth, api } from "./api.js";

const $ = (id) => document.getElementById(id);

/** What the form says for a refused sign-in. */
function refusal(err) {
  if (err.status === 401) return "That email and password were not accepted.";
  if (err.status === 429) return `Too many sign-in attempts. Try again in ${Math.ceil(err.retryAfter ?? 60)} seconds.`;
  return err.message || "Signing in failed.";
}

/** Shows the form instead of the app; `message` says why (a session that ended, a sign-out). */
export function showSignIn(message = "") {
  $("app").hidden = true;
  $("signin").hidden = false;
  $("signin-error").textContent = message;
  $("password").value = "";
  ($("email").value ? $("password") : $("email")).focus();
}

export function hideSignIn() {
  $("signin").hidden = true;
  $("app").hidden = false;
}

/** What the page says on landing back from the organisation's provider without a session, if it did. */
function landedFailed() {
  const params = new URLSearchParams(location.search);
  if (params.get("sign_in") !== "failed") return "";
  history.replaceState(null, "", location.pathname + location.hash);
  return "Signing in with your organisation did not work. Try again, or ask your administrator.";
}

/** Wires the form: `signedIn(session)` runs once the server has opened a session. Answers what the
 * page should say when it shows the form first. */
export function setUpSignIn(signedIn) {
  api
    .signInMethods()
    .then((offered) => ($("signin-oidc").hidden = !offered.oidc))
    .catch(() => {}); // the password form alone
  $("signin-form").addEventListener("submit", async (event) => {
    event.preventDefault();
    const email = $("email").value.trim();
    const password = $("password").value;
    if (!email || !password) return;
    const button = $("signin-submit");
    button.disabled = true;
    $("signin-error").textContent = "";
    try {
      const session = await auth.signIn(email, password);
      $("password").value = "";
      signedIn(session);
    } catch (err) {
      $("password").value = "";
      $("signin-error").textContent = refusal(err);
      $("password").focus();
    } finally {
      button.disabled = false;
    }
  });
  return landedFailed();
}
