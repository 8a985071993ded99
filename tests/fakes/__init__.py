"""The tests' stand-ins for the outside world, each following its real counterpart's contract.

* :mod:`tests.fakes.discord_api` - Discord's REST API and gateway on 127.0.0.1, checking requests
  against Discord's published OpenAPI spec;
* :mod:`tests.fakes.gen_service` - the generation service of ``SERVICE_API.md``, with knobs for
  every odd and hostile answer;
* :mod:`tests.fakes.media` - real small MP4/PNG files made with PyAV at test time;
* :mod:`tests.fakes.clock` - a clock the test moves by hand;
* :mod:`tests.fakes.chat_side` - the runner's chat side, recorded (what Discord would be told);
* :mod:`tests.fakes.unused` - a typed stand-in for a collaborator the code under test never touches.
"""
