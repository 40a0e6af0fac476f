// A real OpenID Connect provider on loopback for the tests: npm oauth2-mock-server.
//
// Usage: node tests/support/oidc_mock_provider.mjs   (env OIDC_MOCK_CLAIMS_FILE optional)
// Prints one JSON line {"url": "http://127.0.0.1:PORT"} once it listens (on a free port),
// then serves until killed. Its /authorize logs the browser in at once (no login form).
//
// OIDC_MOCK_CLAIMS_FILE names a JSON file re-read for every ID token, so a test can change
// the claims between logins: its keys are merged into the ID token's claims (null deletes
// one), except these directives:
//   "__exp_in": N             the ID token expires N seconds from now
//   "__tamper_signature": true  the ID token's claims are changed after signing
//   "__login_form": true      /authorize shows a login form (GET /login-form) instead of
//                             logging the browser in: what a real provider does after logout
import { readFileSync } from "node:fs";
import { OAuth2Server, Events } from "oauth2-mock-server";

const claimsFile = process.env.OIDC_MOCK_CLAIMS_FILE;

function directives() {
  if (!claimsFile) return {};
  try {
    return JSON.parse(readFileSync(claimsFile, "utf8"));
  } catch {
    return {};
  }
}

const server = new OAuth2Server();
await server.issuer.keys.generate("RS256");

server.service.on(Events.BeforeTokenSigning, (token) => {
  if (token.payload.aud === undefined) return; // access tokens: left alone
  for (const [key, value] of Object.entries(directives())) {
    if (key === "__exp_in") token.payload.exp = Math.floor(Date.now() / 1000) + value;
    else if (key.startsWith("__")) continue;
    else if (value === null) delete token.payload[key];
    else token.payload[key] = value;
  }
});

server.service.on(Events.BeforeResponse, (response) => {
  const idToken = response.body && response.body.id_token;
  if (!idToken || !directives().__tamper_signature) return;
  const [header, payload, signature] = idToken.split(".");
  const claims = JSON.parse(Buffer.from(payload, "base64url").toString("utf8"));
  claims.groups = ["cluster-admins"];
  const forged = Buffer.from(JSON.stringify(claims)).toString("base64url");
  response.body.id_token = `${header}.${forged}.${signature}`;
});

server.service.on(Events.BeforeAuthorizeRedirect, (redirect) => {
  if (directives().__login_form) redirect.url.href = `${server.issuer.url}/login-form`;
});

server.service.addRoute("GET", "/login-form", (_req, res) => {
  res.writeHead(200, { "Content-Type": "text/html" });
  res.end("<h1>provider login form</h1>");
});

await server.start(0, "127.0.0.1");
const { port } = server.address();
server.issuer.url = `http://127.0.0.1:${port}`;
process.stdout.write(JSON.stringify({ url: server.issuer.url }) + "\n");

const stop = async () => {
  await server.stop();
  process.exit(0);
};
process.on("SIGTERM", stop);
process.on("SIGINT", stop);
