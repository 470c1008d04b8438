"""The OpenAPI 3.1 description of the API (``GET /openapi.json``), kept as data.

``document`` holds the core paths and assembles the document; the building
blocks are in ``parts``, the component schemas in ``schemas`` and
``targets``, the console's paths in ``console``, and each feature's paths in
its own module (``audit``, ``calendars``, ``host_policies``,
``notifications``, ``signing``, ``tokens``, ``workflows``); ``parts``'
``collection_paths`` draws a list/create/get/replace/delete collection.
"""
