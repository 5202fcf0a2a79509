package console

import (
	"fmt"
	"html/template"
	"time"
)

// pages are the templates, each parsed with the layout.
var pages = []string{"login", "error", "overview", "decide", "search", "actions", "execution", "confirm"}

func (s *Server) parseTemplates() error {
	funcs := template.FuncMap{
		"iso":      func(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000Z") },
		"utc":      func(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05Z") },
		"age":      func(t time.Time) string { return age(time.Since(t)) },
		"duration": age,
		"short": func(h string) string {
			if len(h) > 12 {
				return h[:12]
			}
			return h
		},
	}
	s.tmpl = map[string]*template.Template{}
	for _, p := range pages {
		t, err := template.New(p).Funcs(funcs).ParseFS(templateFS, "templates/layout.html", "templates/"+p+".html")
		if err != nil {
			return fmt.Errorf("console: template %s: %w", p, err)
		}
		s.tmpl[p] = t
	}
	return nil
}

// age says a duration the way a person reads it at a glance.
func age(d time.Duration) string {
	switch {
	case d < 0:
		return "0s"
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm %ds", int(d.Minutes()), int(d.Seconds())%60)
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh %dm", int(d.Hours()), int(d.Minutes())%60)
	}
	return fmt.Sprintf("%dd %dh", int(d.Hours())/24, int(d.Hours())%24)
}
