package activities

import (
	"reflect"
	"slices"
	"strings"
	"testing"
)

// registerAgent registers every activity of a on env, as the worker does.
func registerAgent(env interface{ RegisterActivity(any) }, a *Agent) {
	for _, concern := range a.Activities() {
		env.RegisterActivity(concern)
	}
}

// Every exported method of an activity struct is an activity, so no activity name may
// be served by two structs (the SDK would refuse the second registration) and nothing a
// struct shares with the others may be exported.
func TestNoActivityIsServedTwice(t *testing.T) {
	owner := map[string]string{}
	for _, concern := range New(Config{Name: "node-a"}).Activities() {
		typ := reflect.TypeOf(concern)
		if typ.NumMethod() == 0 {
			t.Errorf("%s has no activity", typ)
		}
		for i := range typ.NumMethod() {
			name := typ.Method(i).Name
			if prev, ok := owner[name]; ok {
				t.Errorf("activity %s is a method of both %s and %s", name, prev, typ)
			}
			owner[name] = typ.String()
		}
	}
	var names []string
	for name := range owner {
		names = append(names, name)
	}
	slices.Sort(names)
	t.Logf("%d activities: %s", len(names), strings.Join(names, ", "))
}
