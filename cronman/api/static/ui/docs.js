// Starts Swagger UI on the API's own OpenAPI document. "Try it out" sends
// the dashboard's token (this browser's localStorage) unless one is given
// through "Authorize".
"use strict";
window.addEventListener("DOMContentLoaded", () => {
  window.SwaggerUIBundle({
    url: "openapi.json",
    dom_id: "#swagger-ui",
    deepLinking: true,
    presets: [window.SwaggerUIBundle.presets.apis],
    layout: "BaseLayout",
    validatorUrl: null,
    requestInterceptor: (req) => {
      const token = window.localStorage.getItem("cronman.token");
      if (token && !req.headers.Authorization) req.headers.Authorization = "Bearer " + token;
      return req;
    },
  });
});
