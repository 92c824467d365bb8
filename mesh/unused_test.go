package mesh

import "testing"

// Tags and parameters the templates do not name are accepted, as Kuma accepts them: a host
// naming only app and env still needs kuma.io/service among its tags (the VirtualHost draft).
func TestUnusedTemplateNamesAccepted(t *testing.T) {
	for name, in := range map[string]string{
		"the VirtualOutbound design tags": `type: VirtualOutbound
mesh: prod
name: by-env
selectors: [{match: {kuma.io/service: "*", env: "*"}}]
conf:
  host: "{{app}}.{{env}}.internal"
  port: 8080
  tags: {kuma.io/service: svc, app: app, env: env}
`,
		"kuma parameters": `type: VirtualOutbound
mesh: prod
name: by-tier
selectors: [{match: {kuma.io/service: orders}}]
conf:
  host: "{{.tier}}.orders.internal"
  port: "443"
  parameters: [{name: tier, tagKey: team.example.com/tier}, {name: service, tagKey: kuma.io/service}]
`,
	} {
		res, err := Decode("f.yaml", []byte(in))
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if len(res) != 1 {
			t.Errorf("%s: %d resources, want 1", name, len(res))
		}
	}
}
