// A real OpenID Connect provider (panva's oidc-provider) for the console's sign-in tests, on loopback.
//   node provider.mjs CONFIG_JSON
// CONFIG_JSON: {"port": P, "issuer": "http://localhost:P", "clients": [{client_id, client_secret, redirect_uris}],
//               "users": {"login": {"name": ..., "groups": [...]}}, "id_token_ttl": seconds,
//               "machines": [{client_id, client_secret, groups}], "resources": {"audience": ttl_seconds}}
// Machines take access tokens by the client credentials grant for a resource of "resources" (RFC 8707):
// JWTs as RFC 9068 profiles them (typ at+jwt), with the machine's groups as a claim.
// Sign-in is the library's own development form (any password): the login names the account, and only the
// accounts of "users" exist. Consent is granted to the configured clients without a second page.
import Provider, { errors } from 'oidc-provider';

const config = JSON.parse(process.argv[2]);
const users = config.users;
const machines = config.machines || [];
const resources = config.resources || {};

const provider = new Provider(config.issuer, {
  clients: [
    ...config.clients.map((c) => ({ ...c, grant_types: ['authorization_code'], response_types: ['code'] })),
    ...machines.map((m) => ({ client_id: m.client_id, client_secret: m.client_secret, grant_types: ['client_credentials'],
                              response_types: [], redirect_uris: [] })),
  ],
  features: {
    clientCredentials: { enabled: true },
    resourceIndicators: {
      enabled: true,
      defaultResource: () => undefined,
      useGrantedResource: () => true,
      getResourceServerInfo: (ctx, resource, client) => {
        if (!(resource in resources)) throw new errors.InvalidTarget();
        const machine = machines.find((m) => m.client_id === client.clientId) || {};
        return { scope: 'api', audience: resource, accessTokenTTL: machine.ttl || resources[resource], accessTokenFormat: 'jwt',
                 jwt: { sign: { alg: 'RS256' } } };
      },
    },
  },
  extraTokenClaims: (ctx, token) => {
    const machine = machines.find((m) => m.client_id === token.clientId);
    return machine ? { groups: machine.groups } : undefined;
  },
  pkce: { required: () => true },
  scopes: ['openid', 'profile', 'email', 'groups'],
  claims: { openid: ['sub'], profile: ['name', 'preferred_username'], email: ['email'], groups: ['groups'] },
  findAccount: (ctx, id) => {
    const user = users[id];
    if (!user) return undefined;
    return {
      accountId: id,
      claims: () => ({ sub: id, name: user.name || id, preferred_username: id, email: `${id}@example.test`,
                       groups: user.groups || [] }),
    };
  },
  loadExistingGrant: async (ctx) => {
    const grant = new ctx.oidc.provider.Grant({ clientId: ctx.oidc.client.clientId, accountId: ctx.oidc.session.accountId });
    grant.addOIDCScope('openid profile email groups');
    await grant.save();
    return grant;
  },
  ttl: { IdToken: config.id_token_ttl || 3600, AccessToken: 3600, Session: 3600, Interaction: 600, Grant: 3600 },
  cookies: { keys: ['the test provider signs its cookies with this'] },
});
provider.proxy = false;

provider.listen(config.port, '127.0.0.1', () => {
  console.log(`ready ${config.issuer}`);
});
